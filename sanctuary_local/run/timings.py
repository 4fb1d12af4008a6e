"""What a run records about itself besides its outputs: ``timings.json`` (per-stage wall
time, load time, tokens, per-claim distribution, memory, budget decisions), a pure function
of what ``reporting.RunReporter`` measured. ``manifest.json`` is ``manifest.py``'s."""

from __future__ import annotations

import resource
import statistics
from collections import Counter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sanctuary_local.records import Prediction
    from sanctuary_local.run.stage_files import StageFile

__all__ = ["peak_rss_mb", "run_timings"]


def peak_rss_mb() -> float:
    """Peak resident memory of this process and of its (finished) worker processes, MB."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return round(max(own, kids) / 1024.0, 1)


def run_timings(preds: list[Prediction], files: dict[str, StageFile], stats: dict[str, dict[str, Any]], wall: float,
                gpu: dict[str, Any] | None, budget_s: float | None, budget_notes: list[dict[str, Any]]) -> dict[str, Any]:
    """``timings.json`` of ``preds``: ``stats`` as ``RunReporter.stage`` counted them, each
    claim's seconds from its stage files' extras, ``wall`` seconds since the run started."""
    idx = [p.claim_index for p in preds]
    stages: dict[str, Any] = {}
    for name, st in stats.items():
        secs = [float(files[name].extras.get(i, {}).get("seconds", 0.0)) for i in idx]
        stages[name] = {
            "total_s": round(st["total_s"], 3), "load_s": round(st["load_s"], 3), "claims_this_run": st["n"],
            "per_claim": _dist(secs), "tokens_in": st["tokens_in"], "tokens_out": st["tokens_out"],
            "tokens_per_s_out": round(st["tokens_out"] / st["total_s"], 2) if st["total_s"] else None,
        }
        if name == "hyde":  # questions written per claim: the full-scale target asks for at least 5
            counts = [len(files[name].records[i].queries) for i in idx if i in files[name].records]
            stages[name]["questions"] = {**_dist([float(c) for c in counts]), "min": min(counts, default=None)}
    out: dict[str, Any] = {
        "n_claims": len(preds), "wall_s": round(wall, 3),
        "wall_s_per_claim": round(wall / len(preds), 3) if preds else None,
        "peak_rss_mb": peak_rss_mb(), "gpu": gpu, "stages": stages,
    }
    if budget_s:
        achieved = sum(stages[s]["per_claim"]["mean"] or 0.0 for s in stages)
        out["budget"] = {"budget_s_per_claim": budget_s, "decisions": budget_notes,
                         "achieved_s_per_claim": round(wall / max(1, len(preds)), 3),
                         "achieved_stage_sum_s_per_claim": round(achieved, 3),
                         "levels": dict(Counter(str(p.meta.get("budget", {}).get("levels", {}).get("verdict", 0)) for p in preds))}
    return out


def _dist(xs: list[float]) -> dict[str, float | None]:
    if not xs:
        return {"mean": None, "p50": None, "p95": None}
    s = sorted(xs)
    p95 = s[min(len(s) - 1, int(round(0.95 * (len(s) - 1))))]
    return {"mean": round(statistics.fmean(s), 4), "p50": round(statistics.median(s), 4), "p95": round(p95, 4)}
