"""Benchmark the Hungarian-METEOR scorer: the 250-claim FEVER-8 baseline scored twice over
(500 claims, fresh process, cold caches) → ``benchmarks/results/speed/eval_meteor.{json,md}``.

    python benchmarks/speed/meteor.py [--workers N] [--copies 2]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT.parent / "shared" / "data" / "fever8_baseline"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--copies", type=int, default=2)
    args = parser.parse_args()
    from sanctuary_local.evaluation.evaluate import evaluate
    from sanctuary_local.evaluation.inputs import EvalExample, align, load_gold, load_predictions

    t0 = time.perf_counter()
    gold = load_gold(BASELINE / "solution_dev_part_a.csv")
    pred = load_predictions(BASELINE / "submission_part_a.csv")
    # Distinct ids per copy; identical texts (tokenisation caches are per process, so the
    # second copy is cheaper than a truly new claim set would be — reported as such).
    rename = lambda xs, k: [EvalExample(f"{k}-{x.claim_id}", x.claim, x.label, x.qa_pairs) for x in xs]  # noqa: E731
    gold_n = [g for k in range(args.copies) for g in rename(gold, k)]
    pred_n = [p for k in range(args.copies) for p in rename(pred, k)]
    t1 = time.perf_counter()
    report = evaluate(align(gold_n, pred_n), workers=args.workers)
    t2 = time.perf_counter()
    result = {
        "claims": len(gold_n),
        "workers": args.workers or len(os.sched_getaffinity(0)),
        "cpus": os.cpu_count(),
        "load_s": round(t1 - t0, 2),
        "score_s": round(t2 - t1, 2),
        "total_s": round(t2 - t0, 2),
        "q_only": round(report.q_only, 4),
        "qa": round(report.qa, 4),
        "averitec_0.25": round(report.averitec[0.25], 4),
        "python": platform.python_version(),
        "load_average_1m_at_end": round(os.getloadavg()[0], 1),
        "note": "wall clock on a shared 2-core box; includes WordNet load (~4 s) inside score_s",
    }
    out = ROOT / "benchmarks" / "results" / "speed"
    out.mkdir(parents=True, exist_ok=True)
    (out / "eval_meteor.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    md = "| claims | workers | score s | Q-only | Q+A | AVeriTeC@0.25 |\n|---|---|---|---|---|---|\n"
    md += f"| {result['claims']} | {result['workers']} | {result['score_s']} | {result['q_only']} | {result['qa']} | {result['averitec_0.25']} |\n"
    (out / "eval_meteor.md").write_text(md + f"\n{result['note']}\n")
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())


if __name__ == "__main__":
    main()
