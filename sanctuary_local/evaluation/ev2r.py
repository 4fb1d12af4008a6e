"""Ev2R evidence recall with a local LLM judge (Akhtar et al., "Ev2R", arXiv 2411.05375;
the "new AVeriTeC score" of the FEVER-8 scorer).

Reference-based atomic evaluation: for each claim the judge splits the reference (gold) and
the predicted evidence into atomic facts and marks, for every reference fact, whether the
prediction supports it (and vice versa). Recall = supported reference facts / reference
facts; precision the converse. It runs twice per claim, as the official scorer: on the
questions only (Q-only recall) and on the question-answer pairs (Q+A recall). A claim counts
for the new AVeriTeC score when its label is right and its Q+A recall is > 0.5. A failed or
unparseable judge answer scores 0, as in the official scorer.

Figures depend on the judge: the official one is Llama-3.3-70B. Every output names the
judge; figures from different judges are not comparable.

Judge answers are cached on disk (one JSON file per request, keyed by judge model id,
prompt-file hash, messages, sampling and schema), so re-scoring costs nothing.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson

from sanctuary_local.config.settings import SamplingConfig
from sanctuary_local.errors import UserError
from sanctuary_local.evaluation.inputs import EvalExample
from sanctuary_local.io.safe_io import atomic_write_bytes, read_regular
from sanctuary_local.llm.base import ChatMessage, ChatRequest, LLMBackend
from sanctuary_local.prompts import load_prompt, load_schema, prompt_hash, render

PROMPTS = {"q": "ev2r_q.txt", "qa": "ev2r_qa.txt"}
SCHEMA = "ev2r_schema.json"
#: The new AVeriTeC score counts a claim when Q+A recall is strictly above this.
RECALL_THRESHOLD = 0.5
NOT_COMPARABLE = "Ev2R figures depend on the judge model; only compare figures produced by the same judge."


@dataclass(frozen=True, slots=True)
class Judgement:
    """One parsed judge answer: counts of (supported) reference and predicted facts."""

    ref_facts: int
    ref_supported: int
    pred_facts: int
    pred_supported: int
    ok: bool
    error: str = ""

    @property
    def recall(self) -> float:
        return self.ref_supported / self.ref_facts if (self.ok and self.ref_facts) else 0.0

    @property
    def precision(self) -> float:
        return self.pred_supported / self.pred_facts if (self.ok and self.pred_facts) else 0.0


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "supported", "1")
    return bool(value)


def _first_json_object(text: str) -> Any:
    """The first decodable JSON object in ``text`` (tolerates code fences and chatter)."""
    text = re.sub(r"```(?:json)?", "", text)
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        try:
            obj, _ = decoder.raw_decode(text, match.start())
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            return obj
    raise ValueError("no JSON object in the judge's answer")


def _count(items: Any) -> tuple[int, int]:
    if not isinstance(items, list):
        raise ValueError("fact list is not a JSON array")
    supported = sum(1 for it in items if _truthy(it.get("supported")) if isinstance(it, dict))
    return len(items), supported


def parse_judgement(text: str) -> Judgement:
    """Parse a judge answer; never raises (a bad answer is ``ok=False``, recall 0).

    Accepts our schema (``reference_facts``/``predicted_facts`` lists) and the count keys
    of the official prompt (``facts count reference evidence`` …)."""
    try:
        obj = _first_json_object(text)
        if "reference_facts" in obj:
            ref = _count(obj["reference_facts"])
            pred = _count(obj.get("predicted_facts", []))
        else:
            kind = "evidence" if "facts count reference evidence" in obj else "questions"
            ref = (int(obj[f"facts count reference {kind}"]), int(obj[f"support reference {kind}"]))
            pred = (int(obj.get(f"facts count predicted {kind}", 0)), int(obj.get(f"support predicted {kind}", 0)))
        if not (0 <= ref[1] <= ref[0] and 0 <= pred[1] <= pred[0]):
            raise ValueError(f"inconsistent counts {ref} {pred}")
        return Judgement(ref[0], ref[1], pred[0], pred[1], ok=True)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return Judgement(0, 0, 0, 0, ok=False, error=str(exc)[:200])


def _qa_text(pairs: Sequence[tuple[str, str]]) -> str:
    return "\n".join(f"Q: {q}\nA: {a}" for q, a in pairs) or "(none)"


def _q_text(pairs: Sequence[tuple[str, str]]) -> str:
    return "\n".join(f"- {q}" for q, _ in pairs) or "(none)"


def build_request(mode: str, gold: EvalExample, pred: EvalExample, sampling: SamplingConfig) -> ChatRequest:
    """The judge request of one claim; ``mode`` is ``"q"`` (questions only) or ``"qa"``."""
    fmt = _q_text if mode == "q" else _qa_text
    prompt = render(load_prompt(PROMPTS[mode]), claim=gold.claim, reference=fmt(gold.qa_pairs), prediction=fmt(pred.qa_pairs))
    return ChatRequest(
        messages=(ChatMessage("user", prompt),), sampling=sampling, json_schema=load_schema(SCHEMA), tag=f"ev2r-{mode}:{gold.claim_id}"
    )


#: Bytes of one cached judge answer read at most (an answer is a few KiB of JSON).
CACHE_ENTRY_LIMIT = 16 << 20


class JudgeCache:
    """Judge answers on disk: ``<dir>/<key[:2]>/<key>.json`` (text + judge id)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    @staticmethod
    def key(judge_id: str, req: ChatRequest) -> str:
        payload = {
            "judge": judge_id,
            "prompts": prompt_hash(*PROMPTS.values(), SCHEMA),
            "messages": [(m.role, m.content) for m in req.messages],
            "sampling": asdict(req.sampling),
            "schema": req.json_schema,
        }
        return hashlib.sha256(orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)).hexdigest()

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> str | None:
        try:  # not through a link, never blocking on a FIFO; capped
            return str(orjson.loads(read_regular(self._path(key), CACHE_ENTRY_LIMIT, follow=False))["text"])
        except (OSError, UserError, orjson.JSONDecodeError, KeyError, TypeError):
            return None  # a missing, damaged or odd entry is simply asked again (and replaced)

    def put(self, key: str, judge_id: str, text: str) -> None:
        path = self._path(key)
        if path.parent.is_symlink():  # the entry would land wherever the link points
            raise UserError(f"{path.parent}: is a symbolic link; refusing to write the judge cache through it (remove it)")
        atomic_write_bytes(path, orjson.dumps({"judge": judge_id, "text": text}))


def judge_id(backend: LLMBackend) -> str:
    """How figures name their judge: ``backend:model``."""
    return f"{backend.name}:{backend.model_id}"


def run_judge(backend: LLMBackend, requests: list[ChatRequest], cache: JudgeCache) -> tuple[list[str], dict[str, int]]:
    """Answers for ``requests`` (cached ones are not sent); failed requests give ""."""
    jid = judge_id(backend)
    keys = [cache.key(jid, r) for r in requests]
    texts = [cache.get(k) for k in keys]
    todo = [i for i, t in enumerate(texts) if t is None]
    stats = {"requests": len(requests), "cached": len(requests) - len(todo), "failed": 0}
    if todo:
        results = backend.generate([requests[i] for i in todo])
        for i, res in zip(todo, results):
            texts[i] = res.text if res.ok else ""
            if res.ok:
                cache.put(keys[i], jid, res.text)  # failures are retried next time
            else:
                stats["failed"] += 1
    return [t or "" for t in texts], stats


def ev2r_scores(
    gold: Sequence[EvalExample], pred: Sequence[EvalExample], backend: LLMBackend, cache: JudgeCache, sampling: SamplingConfig
) -> tuple[dict[str, Any], list[dict[str, float]]]:
    """Ev2R over aligned claims → (summary, per-claim dicts with q_recall, qa_recall, hit)."""
    requests = [build_request(mode, g, p, sampling) for mode in ("q", "qa") for g, p in zip(gold, pred)]
    texts, stats = run_judge(backend, requests, cache)
    n = len(gold)
    q_judged, qa_judged = [parse_judgement(t) for t in texts[:n]], [parse_judgement(t) for t in texts[n:]]
    per_claim = []
    for g, p, qj, qaj in zip(gold, pred, q_judged, qa_judged):
        hit = 1.0 if (g.label == p.label and qaj.recall > RECALL_THRESHOLD) else 0.0
        per_claim.append({"q_recall": qj.recall, "qa_recall": qaj.recall, "qa_precision": qaj.precision, "hit": hit, "parsed": float(qj.ok and qaj.ok)})
    mean = lambda key: sum(c[key] for c in per_claim) / n if n else 0.0  # noqa: E731
    summary = {
        "judge": judge_id(backend),
        "q_recall": mean("q_recall"),
        "qa_recall": mean("qa_recall"),
        "qa_precision": mean("qa_precision"),
        "score": mean("hit"),
        "threshold": RECALL_THRESHOLD,
        "unparsed_answers": sum(1 for j in (*q_judged, *qa_judged) if not j.ok),
        "judge_calls": stats,
        "prompts": prompt_hash(*PROMPTS.values(), SCHEMA),
        "comparability": NOT_COMPARABLE,
    }
    return summary, per_claim
