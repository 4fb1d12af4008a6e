"""Stage 3's last step: every draft becomes a ``Prediction`` record.

The prediction carries the label, the official evidence (``evidence_view``), the
justification, every flag of stages 1–3, and in ``meta`` what produced the label: the
prompt hash, backend and model, token counts, the raw text, the label probabilities
(trained mode), the trimmed snippets (as data: ``meta.dropped``) and the snippets that look
like prompt injection (``meta.suspected_injection``; flag ``suspected_injection``).
"""

from __future__ import annotations

from typing import Any

from sanctuary_local.records import LABELS, Prediction
from sanctuary_local.stages.evidence_view import official_evidence, suspected_injection
from sanctuary_local.stages.hyde import hyde_prompt_hash
from sanctuary_local.stages.verdict.draft import Context, Draft


def _redacted(d: Draft) -> list[list[int]]:
    """Keys of the snippets the model was shown a redacted copy of (``verdict.flagged``)."""
    if d.shown is None:
        return []
    return [[qi, si] for qi, (mine, shown) in enumerate(zip(d.evidence.queries, d.shown.queries, strict=True))
            for si, (a, b) in enumerate(zip(mine.snippets, shown.snippets, strict=True)) if a != b]


def _meta(d: Draft, ctx: Context, injection: list[str]) -> dict[str, Any]:
    res = d.result
    meta: dict[str, Any] = {
        "hyde_prompt_hash": hyde_prompt_hash(),
        "verdict_prompt_hash": ctx.prompts_hash,
        "verdict_mode": ctx.cfg.mode,
        "backend": ctx.backend.name if ctx.backend is not None else "trained",
        "model": ctx.backend.model_id if ctx.backend is not None else ctx.trained.name,
        "prompt_tokens": res.prompt_tokens if res is not None else 0,
        "completion_tokens": res.completion_tokens if res is not None else 0,
        "cached_tokens": res.cached_tokens if res is not None else 0,
        "seconds": d.seconds,
        "finish_reason": res.finish_reason if res is not None else "",
        "hyde_generation": d.hyde.generation.to_dict(),
        "trimmed": list(d.notes),
        "dropped": sorted([list(k) for k in d.dropped]),
        "withheld": sorted([list(k) for k in d.withheld]),
        "redacted": _redacted(d),
        "raw_text": res.text if res is not None else "",
        **d.meta,
    }
    if d.scores is not None:
        meta["label_scores"] = {**d.scores.to_dict(), "labels": list(LABELS)}
    if injection:
        meta["suspected_injection"] = injection
    return meta


def record(drafts: list[Draft], ctx: Context) -> list[Prediction]:
    """Last step: the predictions, in claim order."""
    preds = []
    for d in drafts:
        evidence, evidence_all, eflags = official_evidence(d.claim, d.evidence)
        injection = suspected_injection(d.evidence)
        flags = (*d.hyde.flags, *d.evidence.flags, *eflags, *d.flags, *(("suspected_injection",) if injection else ()))
        preds.append(Prediction(
            claim_index=d.claim.index, claim_id=d.claim.claim_id, claim=d.claim.text, label=d.label or LABELS[1],
            evidence=evidence, justification=d.justification, provisional_label=d.hyde.provisional_label,
            flags=tuple(dict.fromkeys(flags)), timings={"verdict_s": d.seconds}, meta=_meta(d, ctx, injection),
            evidence_all=evidence_all,
        ))
    return preds
