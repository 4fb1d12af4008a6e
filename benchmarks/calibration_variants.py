"""Which label calibration pays: variants fitted on one run, judged on another.

Every variant is fitted on the raw label scores of a scored run over the *fit* range
(AVeriTeC dev 100–149) and judged on a scored run over the *tuning* range (dev 0–49); the
reporting range (50–99) is never read here. Rows: the majority class, stage 1's
provisional label alone, the raw argmax of the label scores, and the calibration variants
(per-class bias; + temperature; + stage-1 prior; L2 strengths). AVeriTeC@0.25 uses the
run's own evidence (its Q+A METEOR per claim, computed once): only labels differ.

    python benchmarks/calibration_variants.py \
        --fit-run runs/quality_e2e/cpu_scored_raw_dev100-149/run \
        --tune-run runs/quality_e2e/cpu_scored_raw_dev0-49/run --label cpu

Writes ``benchmarks/results/calibration_variants_<label>.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sanctuary_local.calibrate import load_fit_data, predicted_labels, run_predictions  # noqa: E402
from sanctuary_local.evaluation.labels import label_metrics  # noqa: E402
from sanctuary_local.evaluation.meteor import averitec_hits  # noqa: E402
from sanctuary_local.records import LABELS  # noqa: E402
from sanctuary_local.stages.calibration import Calibration, fit, fit_logistic  # noqa: E402

DEFAULT_CLAIMS = REPO.parent / "shared" / "data" / "averitec" / "dev_part_a.json"
VARIANTS = (  # (name, prior, temperature, l2)
    ("bias", False, False, 0.1),
    ("bias + temperature", False, True, 0.1),
    ("bias + stage-1 prior", True, False, 0.1),
    ("bias + temperature + prior, l2 0.01", True, True, 0.01),
    ("bias + temperature + prior, l2 0.1", True, True, 0.1),
    ("bias + temperature + prior, l2 1.0", True, True, 1.0),
    ("logistic regression, scores + stage-1 label, C 0.3", "logistic", None, 0.3),
    ("logistic regression, scores + stage-1 label, C 1.0", "logistic", None, 1.0),
    ("logistic regression, scores + stage-1 label, C 3.0", "logistic", None, 3.0),
)


def qa_utilities(run_dir: Path, claims: Path, indices: tuple[int, ...]) -> dict[int, float]:
    """Q+A Hungarian METEOR of each claim's evidence against its gold QA (as ``eval`` reads them)."""
    from sanctuary_local.evaluation.inputs import load_gold
    from sanctuary_local.evaluation.meteor import batch_utilities

    gold = load_gold(claims)
    preds = run_predictions(run_dir)
    pred_pairs = [tuple((e.question, e.answer) for e in preds[i].evidence) for i in indices]
    gold_pairs = [gold[i].qa_pairs for i in indices]
    return {i: qa for i, (_, qa) in zip(indices, batch_utilities(pred_pairs, gold_pairs), strict=True)}


def row(name: str, gold: list[str], pred: list[str], qa: list[float]) -> dict[str, Any]:
    m = label_metrics(gold, pred)
    return {"row": name, "accuracy": round(m.accuracy, 3), "macro_f1": round(m.macro_f1, 3),
            "averitec_0.25": round(sum(averitec_hits(u, g == p, 0.25) for g, p, u in zip(gold, pred, qa, strict=True)) / len(gold), 3),
            "recall": {lab: round(m.per_class[lab].recall, 3) for lab in LABELS},
            "predicted": {lab: pred.count(lab) for lab in LABELS}}


def labels_of(examples: Any, cal: Calibration | None) -> list[str]:
    return predicted_labels(examples, cal)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fit-run", required=True, type=Path, help="scored run over the fit range (100-149)")
    ap.add_argument("--tune-run", type=Path, help="scored run over the tuning range (0-49); without it each variant is "
                    "judged by leave-one-out on the fit run itself (every claim predicted by a fit without it)")
    ap.add_argument("--claims", type=Path, default=DEFAULT_CLAIMS, help="claims with gold labels")
    ap.add_argument("--label", default="cpu")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = ap.parse_args(argv)

    fit_data = load_fit_data(args.fit_run, args.claims)
    loo = args.tune_run is None
    tune = fit_data if loo else load_fit_data(args.tune_run, args.claims)
    if not loo and set(fit_data.indices) & set(tune.indices):
        sys.exit("error: the fit and tuning runs share claims")
    gold = [e.gold for e in tune.examples]
    qa_map = qa_utilities(args.tune_run or args.fit_run, args.claims, tune.indices)
    qa = [qa_map[i] for i in tune.indices]
    rows = [row("majority class (Refuted)", gold, ["Refuted"] * len(gold), [0.0] * len(gold)),
            row("stage-1 provisional label", gold, [e.provisional or "Refuted" for e in tune.examples], qa),
            row("raw label scores (argmax)", gold, labels_of(tune.examples, None), qa)]
    fitted = {}
    for name, prior, temperature, l2 in VARIANTS:
        def fit_on(examples: Any, prior: Any = prior, temperature: Any = temperature, l2: float = l2) -> Calibration:
            if prior == "logistic":  # l2 holds C
                return fit_logistic(examples, fit_data.model_sha256, fit_data.prompt_hash, c=l2)
            return fit(examples, fit_data.model_sha256, fit_data.prompt_hash, prior=prior, temperature=temperature, l2=l2)

        fitted[name] = fit_on(fit_data.examples).to_dict()
        if loo:  # claim i labelled by the calibration fitted on the other claims
            ex = fit_data.examples
            pred = [labels_of([ex[i]], fit_on(ex[:i] + ex[i + 1:]))[0] for i in range(len(ex))]
        else:
            pred = labels_of(tune.examples, fit_on(fit_data.examples))
        rows.append(row(name, gold, pred, qa))
    res = {"fit_run": str(args.fit_run), "tune_run": str(args.tune_run) if args.tune_run else "leave-one-out",
           "fit_indices": list(fit_data.indices), "tune_indices": list(tune.indices), "rows": rows, "calibrations": fitted}
    args.out.mkdir(parents=True, exist_ok=True)
    base = args.out / f"calibration_variants_{args.label}"
    base.with_suffix(".json").write_text(json.dumps(res, indent=2) + "\n", "utf-8")
    md = [f"# Label calibration variants: {args.label}", "",
          f"Fitted on {len(fit_data.examples)} claims of `{args.fit_run}` (dev {fit_data.indices[0]}-{fit_data.indices[-1]}), "
          + (f"judged by leave-one-out on the same claims (each claim labelled by the variant fitted on the other "
           f"{len(tune.examples) - 1}). " if loo else
           f"judged on {len(tune.examples)} claims of `{args.tune_run}` (dev {tune.indices[0]}-{tune.indices[-1]}). ")+
          "AVeriTeC@0.25 uses the run's evidence; only labels differ between rows.", "",
          "| row | accuracy | macro-F1 | AVeriTeC@0.25 | recall S / R / NEE / C | predicted S / R / NEE / C |",
          "|---|---|---|---|---|---|"]
    for r in rows:
        rec = " / ".join(f"{r['recall'][lab]:.2f}" for lab in LABELS)
        pred = " / ".join(str(r["predicted"][lab]) for lab in LABELS)
        md.append(f"| {r['row']} | {r['accuracy']:.3f} | {r['macro_f1']:.3f} | {r['averitec_0.25']:.3f} | {rec} | {pred} |")
    base.with_suffix(".md").write_text("\n".join(md) + "\n", "utf-8")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
