"""Which label calibration pays: variants fitted on one run, judged on another.

Every variant is fitted on a run over the *fit* range (AVeriTeC dev 100–149) and judged
either on a run over the *tuning* range (dev 0–49) or, without one, by leave-one-out on the
fit run itself; the reporting range (50–99) is never read here. The runs are scored runs
(``verdict.mode = scored``: the four label scores) or stance runs (``verdict.mode =
stance``: the passages' stance features). Rows: the majority class, stage 1's provisional
label alone, the raw argmax of the label scores (or the stance rule), and the calibration
variants: per-class bias, temperature, stage-1 prior (label scores only), and logistic
regressions at several L2 strengths, with and without balanced class weights.
``--also-run`` adds the other kind of run on the same claims: its inputs are joined to the
fit run's claim by claim, for logistic regressions over label scores *and* stances.
AVeriTeC@0.25 uses the fit (or tuning) run's own evidence (its Q+A METEOR per claim,
computed once): only labels differ between rows.

    python benchmarks/calibration_variants.py \
        --fit-run runs/quality_e2e/cpu_stance_raw_dev100-149/run \
        --also-run runs/quality_e2e/cpu_scored_raw_dev100-149/run --label cpu_stance_loo_dev100-149

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
SCALING = (  # (name, prior, temperature, l2): label scores only
    ("bias", False, False, 0.1),
    ("bias + temperature", False, True, 0.1),
    ("bias + stage-1 prior", True, False, 0.1),
    ("bias + temperature + prior, l2 0.01", True, True, 0.01),
    ("bias + temperature + prior, l2 0.1", True, True, 0.1),
    ("bias + temperature + prior, l2 1.0", True, True, 1.0),
)
LOGISTIC = ((0.3, False), (1.0, False), (3.0, False), (0.3, True), (1.0, True), (3.0, True))  # (C, balanced)


def variants(inputs: str, scaling: bool) -> list[tuple[str, Any]]:
    """(row name, fit(examples, sha, prompt) -> Calibration) for runs with these inputs."""
    out: list[tuple[str, Any]] = []
    if scaling:
        for name, prior, temperature, l2 in SCALING:
            out.append((name, lambda ex, sha, h, p=prior, t=temperature, l=l2: fit(ex, sha, h, prior=p, temperature=t, l2=l)))
    for c, bal in LOGISTIC:
        name = f"logistic regression, {inputs} + stage-1 label, C {c}" + (", balanced" if bal else "")
        out.append((name, lambda ex, sha, h, c=c, b=bal: fit_logistic(ex, sha, h, c=c, balanced=b)))
    return out


def joined(a: Any, b: Any) -> tuple[list[Any], tuple[int, ...]]:
    """Examples of run ``a`` with run ``b``'s inputs added, on the claims both scored."""
    from dataclasses import replace

    bmap = dict(zip(b.indices, b.examples, strict=True))
    keep = [(i, e) for i, e in zip(a.indices, a.examples, strict=True) if i in bmap]
    out = [replace(e, logprobs=e.logprobs or bmap[i].logprobs, stance=e.stance or bmap[i].stance) for i, e in keep]
    return out, tuple(i for i, _ in keep)


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


def table(rows: list[dict[str, Any]]) -> list[str]:
    """The markdown table of ``row`` results, one line each."""
    out = ["| row | accuracy | macro-F1 | AVeriTeC@0.25 | recall S / R / NEE / C | predicted S / R / NEE / C |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        rec = " / ".join(f"{r['recall'][lab]:.2f}" for lab in LABELS)
        pred = " / ".join(str(r["predicted"][lab]) for lab in LABELS)
        out.append(f"| {r['row']} | {r['accuracy']:.3f} | {r['macro_f1']:.3f} | {r['averitec_0.25']:.3f} | {rec} | {pred} |")
    return out


def labels_of(examples: Any, cal: Calibration | None) -> list[str]:
    return predicted_labels(examples, cal)


def judged(fit_on: Any, fit_ex: list[Any], tune_ex: list[Any] | None, sha: str, prompt: str) -> list[str]:
    """Labels of the tuning examples, or leave-one-out labels of the fit examples."""
    if tune_ex is None:  # claim i labelled by the calibration fitted on the other claims
        return [labels_of([fit_ex[i]], fit_on(fit_ex[:i] + fit_ex[i + 1:], sha, prompt))[0] for i in range(len(fit_ex))]
    return labels_of(tune_ex, fit_on(fit_ex, sha, prompt))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fit-run", required=True, type=Path, help="scored or stance run over the fit range (100-149)")
    ap.add_argument("--tune-run", type=Path, help="run of the same mode over the tuning range (0-49); without it each "
                    "variant is judged by leave-one-out on the fit run itself (every claim predicted by a fit without it)")
    ap.add_argument("--also-run", type=Path, help="a run of the other mode over the fit claims: adds rows over both "
                    "inputs (leave-one-out only)")
    ap.add_argument("--claims", type=Path, default=DEFAULT_CLAIMS, help="claims with gold labels")
    ap.add_argument("--label", default="cpu")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = ap.parse_args(argv)

    fit_data = load_fit_data(args.fit_run, args.claims)
    loo = args.tune_run is None
    tune = fit_data if loo else load_fit_data(args.tune_run, args.claims)
    if not loo and set(fit_data.indices) & set(tune.indices):
        sys.exit("error: the fit and tuning runs share claims")
    if args.also_run and not loo:
        sys.exit("error: --also-run is judged by leave-one-out: give no --tune-run")
    stance = not fit_data.examples[0].logprobs
    gold = [e.gold for e in tune.examples]
    qa_map = qa_utilities(args.tune_run or args.fit_run, args.claims, tune.indices)
    qa = [qa_map[i] for i in tune.indices]
    sha, prompt = fit_data.model_sha256, fit_data.prompt_hash
    rows = [row("majority class (Refuted)", gold, ["Refuted"] * len(gold), [0.0] * len(gold)),
            row("stage-1 provisional label", gold, [e.provisional or "Refuted" for e in tune.examples], qa),
            row("stance rule (no fit)" if stance else "raw label scores (argmax)", gold, labels_of(tune.examples, None), qa)]
    fitted = {}
    tune_ex = None if loo else list(tune.examples)
    for name, fit_on in variants("stances" if stance else "scores", scaling=not stance):
        fitted[name] = fit_on(list(fit_data.examples), sha, prompt).to_dict()
        rows.append(row(name, gold, judged(fit_on, list(fit_data.examples), tune_ex, sha, prompt), qa))
    if args.also_run:
        both, idx = joined(fit_data, load_fit_data(args.also_run, args.claims))
        if idx != tune.indices:
            sys.exit(f"error: {args.also_run} does not cover the fit run's claims")
        for name, fit_on in variants("scores + stances", scaling=False):
            rows.append(row(name, gold, judged(fit_on, both, None, sha, prompt), qa))
    res = {"fit_run": str(args.fit_run), "also_run": str(args.also_run) if args.also_run else None, "tune_run": str(args.tune_run) if args.tune_run else "leave-one-out",
           "fit_indices": list(fit_data.indices), "tune_indices": list(tune.indices), "rows": rows, "calibrations": fitted}
    args.out.mkdir(parents=True, exist_ok=True)
    base = args.out / f"calibration_variants_{args.label}"
    base.with_suffix(".json").write_text(json.dumps(res, indent=2) + "\n", "utf-8")
    md = [f"# Label calibration variants: {args.label}", "",
          f"Fitted on {len(fit_data.examples)} claims of `{args.fit_run}` (dev {fit_data.indices[0]}-{fit_data.indices[-1]}), "
          + (f"judged by leave-one-out on the same claims (each claim labelled by the variant fitted on the other "
           f"{len(tune.examples) - 1}). " if loo else
           f"judged on {len(tune.examples)} claims of `{args.tune_run}` (dev {tune.indices[0]}-{tune.indices[-1]}). ")+
          "AVeriTeC@0.25 uses the run's evidence; only labels differ between rows.", "", *table(rows)]
    base.with_suffix(".md").write_text("\n".join(md) + "\n", "utf-8")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
