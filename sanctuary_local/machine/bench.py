"""Benchmark the pipeline: per-stage cost per claim, throughput, memory, projection vs. budget.

Input is the ``timings.json`` a run writes (``reporting.RunReporter``); ``summarize`` turns
it into a bench result, which is written as JSON + markdown + a stacked-bar PNG under
``benchmarks/results/speed/``. ``compare`` gives the per-stage ratio of two results. The 60 s
per-claim budget is the FEVER-8 shared task's (SANCTUARY paper §5.5).
"""

from __future__ import annotations

import io
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from sanctuary_local.errors import UserError
from sanctuary_local.io.safe_io import atomic_write_bytes

STAGES = ("hyde", "retrieval", "verdict")
BUDGET_S_PER_CLAIM = 60.0
"""FEVER-8 limit: under 60 s per claim on average on one A10G (paper §5.5)."""
PROJECTION_CLAIMS = 1000


def _stage_summary(st: dict[str, Any]) -> dict[str, Any]:
    per = st.get("per_claim") or {}
    mean = per.get("mean")
    total, out = st.get("total_s") or 0.0, st.get("tokens_out") or 0
    return {
        "s_per_claim": {"mean": mean, "p50": per.get("p50"), "p95": per.get("p95")},
        "claims_per_hour": round(3600.0 / mean, 1) if mean else None,
        "load_s": st.get("load_s"),
        "tokens_in": st.get("tokens_in", 0),
        "tokens_out": out,
        "tokens_per_s_in": round((st.get("tokens_in") or 0) / total, 2) if total else None,
        "tokens_per_s_out": round(out / total, 2) if total else None,
        **({"questions": st["questions"]} if "questions" in st else {}),
    }


def summarize(timings: dict[str, Any], profile: str, label: str, source: str = "") -> dict[str, Any]:
    """Bench result from a run's ``timings.json`` (kept verbatim under ``timings``)."""
    if not isinstance(timings.get("stages"), dict) or not timings.get("n_claims"):
        raise UserError(f"{source or 'timings'}: not a run's timings.json (needs n_claims and stages)")
    stages = {s: _stage_summary(timings["stages"][s]) for s in STAGES if s in timings["stages"]}
    stage_sum = sum(v["s_per_claim"]["mean"] or 0.0 for v in stages.values())
    wall = timings.get("wall_s_per_claim") or timings["wall_s"] / timings["n_claims"]
    projected = wall * PROJECTION_CLAIMS
    return {
        "label": label, "profile": profile, "source": source, "n_claims": timings["n_claims"],
        "host": {"machine": platform.machine(), "python": platform.python_version(), "cpus": _cpus(),
                 "loadavg": [round(x, 2) for x in os.getloadavg()]},  # at the end: the figures' context
        "stages": stages,
        "total": {
            "s_per_claim_wall": round(wall, 3), "s_per_claim_stage_sum": round(stage_sum, 3),
            "claims_per_hour": round(3600.0 / wall, 1) if wall else None,
            "projected_1000_claims_s": round(projected, 1),
            "projected_1000_claims_h": round(projected / 3600.0, 2),
            "budget_s_per_claim": BUDGET_S_PER_CLAIM,
            "within_budget": wall <= BUDGET_S_PER_CLAIM,
            "budget_ratio": round(wall / BUDGET_S_PER_CLAIM, 3),
        },
        "peak_rss_mb": timings.get("peak_rss_mb"),
        "gpu": timings.get("gpu"),
        "timings": timings,
    }


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 0)


def _fmt(v: Any) -> str:
    return "–" if v is None else (f"{v:,.2f}" if isinstance(v, float) else str(v))


def to_markdown(res: dict[str, Any]) -> str:
    """A human-readable report of one bench result."""
    t = res["total"]
    lines = [
        f"# Bench `{res['label']}` — profile `{res['profile']}`, {res['n_claims']} claim(s)",
        "",
        f"Host: {res['host']['machine']}, {res['host']['cpus']} CPU(s), Python {res['host']['python']}; "
        f"GPU: {(res['gpu'] or {}).get('device', 'none')}. Load average at the end: "
        f"{res['host'].get('loadavg', 'not recorded')}. Source: `{res['source']}`.",
        "",
        "| stage | s/claim mean | p50 | p95 | claims/h | load s | tokens in | tokens out | tok/s in | tok/s out |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, st in res["stages"].items():
        s = st["s_per_claim"]
        lines.append(f"| {name} | {_fmt(s['mean'])} | {_fmt(s['p50'])} | {_fmt(s['p95'])} | {_fmt(st['claims_per_hour'])} | "
                     f"{_fmt(st['load_s'])} | {st['tokens_in']} | {st['tokens_out']} | {_fmt(st['tokens_per_s_in'])} | "
                     f"{_fmt(st['tokens_per_s_out'])} |")
    verdict = "within" if t["within_budget"] else "OVER"
    q = res["stages"].get("hyde", {}).get("questions")
    if q and q.get("mean") is not None:
        lines += ["", f"Stage 1 questions per claim: mean {_fmt(q['mean'])}, fewest {q['min']}."]
    gpu = res["gpu"] or {}
    lines += [
        "",
        f"- wall time per claim: **{_fmt(t['s_per_claim_wall'])} s** (stage sum {_fmt(t['s_per_claim_stage_sum'])} s), "
        f"{_fmt(t['claims_per_hour'])} claims/h",
        f"- projected for {PROJECTION_CLAIMS:,} claims: {_fmt(t['projected_1000_claims_s'])} s "
        f"({_fmt(t['projected_1000_claims_h'])} h) — **{verdict}** the {t['budget_s_per_claim']:.0f} s/claim budget "
        f"(×{_fmt(t['budget_ratio'])})",
        f"- peak RSS: {_fmt(res['peak_rss_mb'])} MB; peak GPU memory: {_fmt(gpu.get('peak_memory_mb'))} MB; "
        f"mean GPU utilisation: {_fmt(gpu.get('mean_utilization_pct'))} %",
        "",
    ]
    return "\n".join(lines)


def write_chart(results: list[dict[str, Any]], path: Path) -> Path:
    """Stacked bars: mean seconds per claim of each stage, one bar per result, budget line."""
    import matplotlib

    matplotlib.use("Agg")  # headless: no display on servers
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(4.0, 1.8 * len(results) + 2), 4.5))
    labels = [f"{r['label']}\n({r['profile']})" for r in results]
    bottom = [0.0] * len(results)
    for stage, colour in zip(STAGES, ("#4C72B0", "#55A868", "#C44E52")):
        vals = [(r["stages"].get(stage, {}).get("s_per_claim", {}).get("mean") or 0.0) for r in results]
        ax.bar(labels, vals, bottom=bottom, label=stage, color=colour)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.axhline(BUDGET_S_PER_CLAIM, color="black", linestyle="--", linewidth=1, label="60 s/claim budget")
    ax.set_ylabel("seconds per claim (mean)")
    ax.set_title("sanctuary-local: time per claim by stage")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=110)
    plt.close(fig)
    return atomic_write_bytes(path, png.getvalue())  # a symlink at ``path`` is replaced, not followed


def write_result(res: dict[str, Any], results_dir: Path) -> list[Path]:
    """``bench_<label>.json``, ``.md`` and ``.png`` under ``results_dir``."""
    results_dir.mkdir(parents=True, exist_ok=True)
    stem = f"bench_{res['label']}"  # not Path.with_suffix: a label like "scale0.05" has a dot
    json_path, md_path = results_dir / f"{stem}.json", results_dir / f"{stem}.md"
    atomic_write_bytes(json_path, (json.dumps(res, indent=2) + "\n").encode("utf-8"))
    atomic_write_bytes(md_path, to_markdown(res).encode("utf-8"))
    return [json_path, md_path, write_chart([res], results_dir / f"{stem}.png")]


def load_timings(path: Path) -> dict[str, Any]:
    """A run's ``timings.json`` (or the run directory holding it)."""
    path = Path(path)
    path = path / "timings.json" if path.is_dir() else path
    try:
        return json.loads(path.read_text("utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise UserError(f"{path}: cannot read timings: {exc}") from exc


def load_result(path: Path) -> dict[str, Any]:
    """A bench result JSON (or a raw ``timings.json``, summarised on the fly)."""
    try:
        data = json.loads(Path(path).read_text("utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise UserError(f"{path}: cannot read bench result: {exc}") from exc
    if "total" in data and "stages" in data:
        return data
    return summarize(data, "unknown", Path(path).stem, str(path))


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Per-stage ratio B / A of mean seconds per claim (>1: B is slower), plus wall time."""
    ratios: dict[str, float | None] = {}
    for stage in STAGES:
        ma = a["stages"].get(stage, {}).get("s_per_claim", {}).get("mean")
        mb = b["stages"].get(stage, {}).get("s_per_claim", {}).get("mean")
        ratios[stage] = round(mb / ma, 3) if ma and mb is not None else None
    wa, wb = a["total"]["s_per_claim_wall"], b["total"]["s_per_claim_wall"]
    ratios["total_wall"] = round(wb / wa, 3) if wa else None
    return {"a": a["label"], "b": b["label"], "ratio_b_over_a": ratios}


def compare_markdown(cmp: dict[str, Any], a: dict[str, Any], b: dict[str, Any]) -> str:
    """Table of per-stage seconds per claim of A and B and their ratio."""
    rows = ["| stage | A s/claim | B s/claim | B / A |", "|---|---|---|---|"]
    for stage in STAGES:
        sa = a["stages"].get(stage, {}).get("s_per_claim", {}).get("mean")
        sb = b["stages"].get(stage, {}).get("s_per_claim", {}).get("mean")
        rows.append(f"| {stage} | {_fmt(sa)} | {_fmt(sb)} | {_fmt(cmp['ratio_b_over_a'][stage])} |")
    rows.append(f"| total (wall) | {_fmt(a['total']['s_per_claim_wall'])} | {_fmt(b['total']['s_per_claim_wall'])} | "
                f"{_fmt(cmp['ratio_b_over_a']['total_wall'])} |")
    return f"A = `{cmp['a']}`, B = `{cmp['b']}`\n\n" + "\n".join(rows) + "\n"


def write_comparison(cmp: dict[str, Any], a: dict[str, Any], b: dict[str, Any], results_dir: Path,
                     label: str) -> list[Path]:
    """``bench_compare_<label>.json``, ``.md`` (the B/A table, both sources, both hosts'
    load) and ``.png`` (A and B as stacked per-stage bars against the budget line)."""
    results_dir.mkdir(parents=True, exist_ok=True)
    stem = f"bench_compare_{label}"
    json_path, md_path = results_dir / f"{stem}.json", results_dir / f"{stem}.md"
    atomic_write_bytes(json_path, (json.dumps({"label": label, **cmp, "results": [a, b]}, indent=2) + "\n").encode("utf-8"))
    sources = [f"- {k} = `{r['label']}` (profile `{r['profile']}`, {r.get('n_claims', '?')} claim(s), source "
               f"`{r.get('source', '?')}`; load average at the end {r.get('host', {}).get('loadavg', 'not recorded')})" for k, r in (("A", a), ("B", b))]
    atomic_write_bytes(md_path, (f"# Bench before/after `{label}`\n\n" + compare_markdown(cmp, a, b) + "\n"
                                 + "\n".join(sources) + f"\n\nChart: `{stem}.png`.\n").encode("utf-8"))
    return [json_path, md_path, write_chart([a, b], results_dir / f"{stem}.png")]


def synthetic_inputs(n_claims: int, scale: float, out_dir: Path, seed: int = 7) -> tuple[Path, Path]:
    """Synthetic store (``tests/support/synthetic_store.py``) plus a claims file matching it.

    Each claim's text is a real line of one of its documents (the generator's first
    query answer), so retrieval has genuine hits; labels are not meaningful.
    """
    script = Path(__file__).resolve().parents[2] / "tests" / "support" / "synthetic_store.py"
    if not script.is_file():
        raise UserError(f"--synthetic needs {script} (a source checkout of sanctuary_local)")
    store = out_dir / "store"
    cmd = [sys.executable, str(script), "--claims", str(n_claims), "--scale", str(scale),
           "--seed", str(seed), "--out", str(store)]
    subprocess.run(cmd, check=True, capture_output=True)
    queries = json.loads((store / "queries.json").read_text("utf-8"))
    claims = [{"claim": q[0]["answers"][0][:300], "label": "Not Enough Evidence", "claim_date": "01-01-2024",
               "speaker": "synthetic", "reporting_source": "synthetic", "location_ISO_code": "US",
               "claim_types": ["Event/Property Claim"], "fact_checking_strategies": ["Written Evidence"],
               "questions": []} for q in queries]
    claims_path = out_dir / "claims.json"
    atomic_write_bytes(claims_path, json.dumps(claims, indent=1).encode("utf-8"))
    return claims_path, store
