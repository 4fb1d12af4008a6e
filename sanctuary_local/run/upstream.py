"""A stage-3 prediction completed with what the stages before it recorded."""

from __future__ import annotations

import dataclasses
from typing import Any

from sanctuary_local.config.settings import Config
from sanctuary_local.records import Claim, Prediction
from sanctuary_local.run.budget import knobs
from sanctuary_local.run.state import RunState

__all__ = ["with_upstream"]


def with_upstream(run: RunState, claim: Claim, p: Prediction, verdict_s: float, level: int, cfg: Config) -> Prediction:
    """Attach per-stage timings, budget knobs and upstream (stage 0, 1, 2 and follow-up)
    flags and records to a prediction."""
    h_extra, e_extra = run.hyde.extras.get(claim.index, {}), run.evidence.extras.get(claim.index, {})
    timings = {"hyde_s": h_extra.get("seconds", 0.0), "retrieval_s": e_extra.get("seconds", 0.0), "verdict_s": verdict_s}
    upstream = [*run.hyde.records[claim.index].flags, *run.final_evidence().records[claim.index].flags]
    decomposed = run.cfg.decompose.enabled and claim.index in run.decompose
    if decomposed:
        upstream = [*run.decompose.records[claim.index].flags, *upstream]
        timings["decompose_s"] = run.decompose.extras.get(claim.index, {}).get("seconds", 0.0)
    if run.cfg.followup.enabled:
        timings["followup_s"] = run.followup.extras.get(claim.index, {}).get("seconds", 0.0)
    flags = list(p.flags)
    for f in upstream:
        if f not in flags:
            flags.append(f)
    meta = dict(p.meta)
    if run.cfg.followup.enabled:
        meta["followup"] = _followup_meta(run, claim, cfg)
    if decomposed:
        meta["decomposition"] = _decomposition_meta(run, claim, cfg)
    if run.planner is not None:
        lv = {"hyde": h_extra.get("budget_level", 0), "retrieval": e_extra.get("budget_level", 0), "verdict": level}
        meta["budget"] = {"levels": lv, "knobs": knobs(cfg)}
        if max(lv.values()) > 0:
            flags.append(f"budget_level:{max(lv.values())}")
    return dataclasses.replace(p, timings={**p.timings, **timings}, flags=tuple(flags), meta=meta,
                               claim_id=claim.claim_id, claim=claim.text)


def _followup_meta(run: RunState, claim: Claim, cfg: Config) -> dict[str, Any]:
    from sanctuary_local.modes.followup import followup_prompt_hash

    q = run.followup_q.records[claim.index]
    n_first = len(run.evidence.records[claim.index].queries)
    new = run.final_evidence().records[claim.index].queries[n_first:]
    return {"questions": [x.question for x in q.queries], "found": sum(bool(x.snippets) for x in new),
            "prompt_tokens": q.generation.prompt_tokens, "completion_tokens": q.generation.completion_tokens,
            "cached_tokens": q.generation.cached_tokens, "prompt_hash": followup_prompt_hash(cfg.followup.prompt)}


def _decomposition_meta(run: RunState, claim: Claim, cfg: Config) -> dict[str, Any]:
    from sanctuary_local.modes.decompose import decompose_prompt_hash

    d = run.decompose.records[claim.index]
    return {"components": list(d.components), "exhaustive": d.exhaustive, "added": list(d.added),
            "prompt_tokens": d.generation.prompt_tokens, "completion_tokens": d.generation.completion_tokens,
            "prompt_hash": decompose_prompt_hash(cfg.decompose)}
