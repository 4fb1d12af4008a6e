"""Stage 3, trained mode (``verdict.mode = "trained"``): a classifier learned from AVeriTeC
train gives the four labels' probabilities; no LLM is involved.

    guard (redact flagged text) → classify → justify from the evidence → record

- classify: the claim and the evidence the model may read (``Draft.view``, withheld snippets
  left out) become a ``VerdictInput``; the model's probabilities, and the label by argmax or
  by the decision rule fitted beside the model (``verdict_model.decision``);
- justify: the passages that weigh most for the chosen label, by occlusion (each pair left
  out in turn; how much the label's probability drops), quoted with their URLs.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Any

from sanctuary_local.records import LABELS
from sanctuary_local.stages.verdict.draft import KEPT_PLACES, Context, Draft, LabelScores
from sanctuary_local.verdict_model.confidence import sureness
from sanctuary_local.verdict_model.decision import decide
from sanctuary_local.verdict_model.inputs import QAPair, VerdictInput, excerpt, from_queries, without

#: Pairs the model reads (the official scorer also reads 10 evidence items).
MAX_PAIRS = 10
#: Passages quoted in the justification, and words quoted from each.
JUSTIFY_PASSAGES = 3
#: The least drop in the label's probability for which a passage is quoted as weighing for it: one that
#: rounds to 0.00 would read "without it Refuted falls by 0.00" (a newcomer's walkthrough).
MIN_WEIGHT = 0.005
QUOTE_WORDS = 30


@dataclass(frozen=True, slots=True)
class TrainedVerdict:
    """A loaded verdict model and its decision rule (None: argmax)."""

    model: Any
    """A ``verdict_model.base.VerdictModel``."""
    offsets: tuple[float, ...] | None = None
    name: str = ""
    confidence: dict[str, Any] | None = None
    """The fitted confidence rule (``confidence_rule.json``), None when the model has none."""


def trained_threads(verdict_cfg: Any) -> int:
    """Threads of stage 3's trained model: the verdict LLM's setting, else 2."""
    return int(getattr(verdict_cfg.llm, "n_threads", 0) or 2)


def load_trained(name: str, use_rule: bool = True, threads: int = 2) -> TrainedVerdict:
    """The configured model (``verdict.trained_model``) with its fitted rule, if any."""
    from sanctuary_local.verdict_model.store import load_model, read_confidence, read_rule

    model = load_model(name, threads)
    rule = read_rule(model.directory, model.sha256) if use_rule else None
    return TrainedVerdict(model, tuple(rule["offsets"]) if rule else None, name,
                          read_confidence(model.directory, model.sha256))


def _input(d: Draft) -> VerdictInput:
    """What the model reads: the evidence the verdict may see (withheld snippets left out,
    redacted copies as shown), every question's best snippet first."""
    return from_queries(d.claim.text, d.view.queries, d.withheld, MAX_PAIRS)


def classify(drafts: list[Draft], ctx: Context) -> list[Draft]:
    """Step: label probabilities and the label of every claim, in one batch."""
    tv: TrainedVerdict = ctx.trained
    t = time.perf_counter()
    xs = [_input(d) for d in drafts]
    probs = tv.model.predict_proba(xs)
    labels = decide(probs, tv.offsets)
    per = (time.perf_counter() - t) / max(1, len(drafts))
    out = []
    threshold = tv.confidence.get("threshold") if tv.confidence is not None else None
    for d, x, p, label in zip(drafts, xs, probs, labels, strict=True):
        sure = sureness(p, label, threshold)
        scores = LabelScores(tuple(math.log(max(float(v), 1e-12)) for v in p), tuple(float(v) for v in p),
                             calibrated=tv.offsets is not None, seconds=per,
                             confident=None if tv.confidence is None else bool(threshold is not None and sure.probability >= threshold),
                             threshold=threshold, runner_up=sure.runner_up)
        meta = {**d.meta, "trained_model": tv.name, "trained_model_sha256": tv.model.sha256[:16],
                "decision_offsets": list(tv.offsets) if tv.offsets else None, "pairs_read": len(x.pairs)}
        out.append(dataclasses.replace(d, scores=scores, label=label, meta=meta, seconds=d.seconds + per))
    return out


def _weights(model: Any, x: VerdictInput, label: str, p: float) -> list[tuple[float, int]]:
    """(drop of the label's probability without pair k, k), largest drop first."""
    if not x.pairs:
        return []
    col = LABELS.index(label)
    rest = model.predict_proba([without(x, k) for k in range(len(x.pairs))])[:, col]
    return sorted(((p - float(r), k) for k, r in enumerate(rest)), key=lambda wk: (-wk[0], wk[1]))


def distinct_passages(weighed: list[tuple[float, int]], x: VerdictInput) -> list[tuple[float, int]]:
    """One entry per passage: a snippet that answers several questions is quoted once, at its
    largest weight (``weighed`` comes largest first)."""
    seen: set[str] = set()
    out = []
    for w, k in weighed:
        key = " ".join(x.pairs[k].answer.split())
        if key not in seen:
            seen.add(key)
            out.append((w, k))
    return out


def shown(q: float) -> str:
    """A probability as printed: from the value the record keeps (``KEPT_PLACES``), so that
    the justification, the console and the report print the same figure."""
    return f"{round(float(q), KEPT_PLACES):.2f}"


def _quote(p: QAPair, claim: str) -> str:
    """A passage as the justification quotes it: its ``QUOTE_WORDS`` words nearest its question and
    the claim (``inputs.excerpt``), not its first ones, which can stop short of what decides."""
    return excerpt(p.answer, p.question, claim, QUOTE_WORDS)


def justify(drafts: list[Draft], ctx: Context) -> list[Draft]:
    """Step: a justification written from the records: the label with its probability, and
    the passages whose removal lowers that probability most, quoted with their URLs."""
    tv: TrainedVerdict = ctx.trained
    out = []
    for d in drafts:
        t = time.perf_counter()
        assert d.scores is not None and d.label is not None
        x = _input(d)
        p = d.scores.probabilities[LABELS.index(d.label)]
        ranked = ", ".join(f"{lab} {shown(q)}" for lab, q in sorted(zip(LABELS, d.scores.probabilities), key=lambda kv: -kv[1]))
        text = f"{d.label} (trained verdict model; label probabilities: {ranked})."
        weighed = distinct_passages([(w, k) for w, k in _weights(tv.model, x, d.label, p) if w >= MIN_WEIGHT],
                                    x)[:JUSTIFY_PASSAGES]
        if weighed:
            quotes = [f'[{n}] "{_quote(x.pairs[k], x.claim)}" ({x.pairs[k].url or "no URL"}; '
                      f"without it {d.label} falls by {w:.2f})" for n, (w, k) in enumerate(weighed, 1)]
            text += " The evidence that weighs most for it: " + " ".join(quotes)
        elif not x.pairs:
            text += " No evidence was retrieved: the label rests on the claim's wording alone."
        else:
            text += " No single passage moves the label: it rests on the evidence as a whole and the claim's wording."
        spent = time.perf_counter() - t
        meta = {**d.meta, "weighs_most": [{"pair": k, "url": x.pairs[k].url, "weight": round(w, 4)} for w, k in weighed]}
        out.append(dataclasses.replace(d, justification=text, meta=meta, seconds=d.seconds + spent))
    return out
