"""The figures of the quality harness's rows (``quality/e2e.py``), from gold and predictions:
scores (accuracy, macro-F1, METEOR, AVeriTeC score), seconds per stage, LLM token use, and the
rates of the modes' and the fallbacks' flags."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import orjson

#: Flags whose rate the table reports (a claim counts once per flag).
RATE_FLAGS = ("hyde_claim_fallback", "hyde_repaired", "hyde_line_fallback", "verdict_label_inferred",
              "verdict_label_fallback", "verdict_truncated", "verdict_trimmed", "evidence_placeholder",
              "suspected_injection")


# ---------------------------------------------------------------------------- rows
def score(gold: list, pred: list, workers: int | None) -> dict[str, Any]:
    """Label metrics + Hungarian METEOR of ``pred`` against ``gold`` (EvalExample lists)."""
    from sanctuary_local.evaluation.evaluate import evaluate
    from sanctuary_local.evaluation.inputs import align

    report = evaluate(align(gold, pred), workers=workers)
    d = report.to_dict()
    return {
        "n": d["n_claims"],
        "accuracy": d["labels"]["accuracy"],
        "macro_f1": d["labels"]["macro_f1"],
        "per_class": d["labels"]["per_class"],
        "confusion": d["labels"]["confusion"],
        "q_only": d["meteor"]["q_only"],
        "qa": d["meteor"]["qa"],
        "averitec_0.25": d["meteor"]["averitec_score"],
        "pred_label_counts": dict(Counter(p.label for p in pred)),
    }


def as_examples(preds: list, *, label_of=lambda p: p.label) -> list:
    from sanctuary_local.evaluation.inputs import EvalExample

    return [EvalExample(str(p.claim_id), p.claim, label_of(p) or "", tuple((e.question, e.answer) for e in p.evidence))
            for p in preds]


def stage_seconds(run_dir: Path, indices: list[int]) -> dict[str, float | None]:
    """Mean seconds per claim of each stage, from the per-claim records of the stage files."""
    from sanctuary_local.io.run_files import STAGE_FILES

    out: dict[str, float | None] = {}
    for stage, name in STAGE_FILES.items():
        secs = []
        path = run_dir / name
        for line in path.read_bytes().splitlines() if path.exists() else []:
            obj = orjson.loads(line)
            if obj["claim_index"] in indices:
                secs.append(float((obj.get("extra") or {}).get("seconds", 0.0)))
        out[stage] = round(sum(secs) / len(secs), 2) if secs else None
    return out


def citation_rates(preds: list) -> dict[str, float | None]:
    from sanctuary_local.modes.citations import citation_rates as rates

    return rates(preds)


def followup_stats(preds: list) -> dict[str, float] | None:
    """The follow-up round (followup.enabled): share of claims that got new questions, new
    questions per such claim, and the share of those questions that found a snippet."""
    fs = [p.meta["followup"] for p in preds if isinstance(p.meta.get("followup"), dict)]
    if not fs:
        return None
    asked = [f for f in fs if f["questions"]]
    n_q = sum(len(f["questions"]) for f in asked)
    return {"claims": len(fs), "claims_asked": round(len(asked) / len(fs), 3),
            "questions_per_asked_claim": round(n_q / len(asked), 2) if asked else None,
            "questions_found": round(sum(f["found"] for f in asked) / n_q, 3) if n_q else None,
            "completion_tokens_per_asked_claim": round(sum(f["completion_tokens"] for f in asked) / len(asked), 1) if asked else None}


def decomposition_stats(preds: list) -> dict[str, float] | None:
    """The decomposition (decompose.enabled): share of claims split into several parts, parts
    per split claim, share of split claims whose every part got a label (the AND decided),
    and share where the AND label differs from the model's own."""
    ds = [p for p in preds if isinstance(p.meta.get("decomposition"), dict)]
    if not ds:
        return None
    split = [p for p in ds if isinstance(p.meta.get("components"), dict)]
    decided = [p for p in split if p.meta["components"]["and_label"] is not None]
    return {"claims": len(ds), "split": round(len(split) / len(ds), 3),
            "parts_per_split_claim": round(sum(len(p.meta["components"]["parts"]) for p in split) / len(split), 2) if split else None,
            "and_decided": round(len(decided) / len(split), 3) if split else None,
            "and_overrode": round(sum(p.meta["components"]["and_label"] != p.meta["components"]["model_label"]
                                      for p in decided) / len(split), 3) if split else None}


def llm_usage(run_dir: Path, indices: list[int]) -> dict[str, dict[str, float] | None]:
    """Per LLM stage, from each claim's generation record: prompt, reused-prefix ("cached": prefill
    saved) and completion tokens per claim, and tokens/s in and out over the generation seconds."""
    from sanctuary_local.io.run_files import STAGE_FILES

    def gen_of(stage: str, rec: dict) -> dict:
        return rec.get("generation") or {} if stage in ("decompose", "hyde", "followup_questions") else rec.get("meta") or {}

    out: dict[str, dict[str, float] | None] = {}
    for stage in ("decompose", "hyde", "followup_questions", "verdict"):
        path, gens = run_dir / STAGE_FILES[stage], []
        for line in path.read_bytes().splitlines() if path.exists() else []:
            obj = orjson.loads(line)
            if obj["claim_index"] in indices:
                gens.append(gen_of(stage, obj["record"]))
        if stage in ("decompose", "followup_questions"):
            gens = [g for g in gens if g.get("prompt_tokens")]  # claims without gaps made no follow-up request
            if not gens:
                continue  # the mode was off in this run
        if not gens:
            out[stage] = None
            continue
        tot = {k: sum(float(g.get(k) or 0) for g in gens) for k in ("prompt_tokens", "cached_tokens", "completion_tokens", "seconds")}
        n, secs = len(gens), tot["seconds"] or float("nan")
        out[stage] = {"claims": n, "prompt_tokens_per_claim": round(tot["prompt_tokens"] / n, 1),
                      "prefill_saved_per_claim": round(tot["cached_tokens"] / n, 1),
                      "completion_tokens_per_claim": round(tot["completion_tokens"] / n, 1),
                      "tokens_per_s_in": round(tot["prompt_tokens"] / secs, 1),
                      "tokens_per_s_out": round(tot["completion_tokens"] / secs, 2)}
    return out


def budget_levels(preds: list) -> dict[str, int] | None:
    """Claims per budget level (the highest of a claim's stages) of a ``--budget-s`` run; None otherwise."""
    levels = [max(p.meta["budget"]["levels"].values()) for p in preds if "budget" in p.meta]
    if not levels:
        return None
    counts = Counter(int(x) for x in levels)
    return {str(k): counts[k] for k in sorted(counts)}


def flag_rates(preds: list) -> dict[str, float]:
    n = max(1, len(preds))
    return {f: round(sum(any(x.split(":")[0] == f for x in p.flags) for p in preds) / n, 3) for f in RATE_FLAGS}
