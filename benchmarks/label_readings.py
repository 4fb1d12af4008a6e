"""Several readings of one finished scored run's labels, on the same evidence.

For a run made with ``verdict.mode = "scored"``, each row labels the run's claims another
way and scores them with the run's own evidence (so only labels differ between rows):

- the run's labels (calibrated when the run had a calibration);
- the raw label scores' argmax (no calibration: with ``reasoning_tokens``, the reasoning's
  own label on almost every claim);
- stage 1's provisional label;
- the majority class (Refuted) with the run's evidence: what AVeriTeC@0.25 a constant label
  gets on this evidence (``quality_e2e``'s majority row has no evidence, so its AVeriTeC is 0).

Nothing is fitted here, so it may read the reporting range (dev 50–99).

    python benchmarks/label_readings.py runs/quality_e2e/cpu_scored_reason_cal_heldout50-99/run \\
        --indices 50:100 --label cpu_scored_reason_cal_heldout50-99

Writes ``benchmarks/results/label_readings_<label>.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from calibration_variants import DEFAULT_CLAIMS, qa_utilities, row, table  # noqa: E402

from sanctuary_local.calibrate import run_predictions  # noqa: E402
from sanctuary_local.records import LABELS  # noqa: E402


def readings(run_dir: Path, claims: Path, indices: tuple[int, ...]) -> list[dict]:
    """The table's rows (see the module docstring)."""
    from sanctuary_local.evaluation.inputs import load_gold

    gold_all = load_gold(claims)
    preds = run_predictions(run_dir)
    missing = [i for i in indices if i not in preds or not 0 <= i < len(gold_all)]
    if missing:
        sys.exit(f"error: claims {missing[:5]} have no prediction in {run_dir} or no gold label in {claims}")
    unscored = [i for i in indices if not isinstance(preds[i].meta.get("label_scores"), dict)]
    if unscored:
        sys.exit(f"error: claims {unscored[:5]} of {run_dir} have no label scores (not a scored run?)")
    qa = qa_utilities(run_dir, claims, indices)
    gold = [gold_all[i].label for i in indices]
    u = [qa[i] for i in indices]
    raw = [LABELS[max(range(len(LABELS)), key=lambda k: preds[i].meta["label_scores"]["logprobs"][k])] for i in indices]
    return [
        row("the run's labels", gold, [preds[i].label for i in indices], u),
        row("raw label scores (argmax, no calibration)", gold, raw, u),
        row("stage-1 provisional label", gold, [preds[i].provisional_label for i in indices], u),
        row("majority class (Refuted), with the run's evidence", gold, [LABELS[1]] * len(indices), u),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--indices", required=True, help="a:b, the run's claim range")
    ap.add_argument("--claims", type=Path, default=DEFAULT_CLAIMS)
    ap.add_argument("--label", required=True)
    ap.add_argument("--results-dir", type=Path, default=REPO / "benchmarks" / "results")
    args = ap.parse_args(argv)
    a, b = (int(x) for x in args.indices.split(":"))
    rows = readings(args.run_dir, args.claims, tuple(range(a, b)))
    lines = [f"# Label readings: {args.label}", "",
             f"Run `{args.run_dir}`, dev claims {a}-{b - 1} ({b - a}), labels read several ways; every row is scored "
             "with the run's own evidence, so only labels differ. Nothing is fitted here. Load average "
             f"{[round(x, 2) for x in os.getloadavg()]}.", "", *table(rows)]
    lines += ["", f"Command: `python benchmarks/label_readings.py {' '.join(sys.argv[1:] if argv is None else argv)}`", ""]
    args.results_dir.mkdir(parents=True, exist_ok=True)
    base = args.results_dir / f"label_readings_{args.label}"
    base.with_suffix(".md").write_text("\n".join(lines))
    base.with_suffix(".json").write_text(json.dumps({"label": args.label, "run": str(args.run_dir), "indices": args.indices,
                                                     "rows": rows}, indent=2))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
