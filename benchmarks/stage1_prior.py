"""Stage 1's label *distribution* as the calibration's prior (issue 26, "try and measure").

The calibrations shipped so far read stage 1's provisional label as a one-hot: the label the
model *sampled* (temperature 0.5) as the first field of its JSON answer. This benchmark asks
whether the model's whole belief at that point carries more: for every claim of a finished
scored run it scores the three stage-1 label strings as the start of the stage-1 answer
(``{"label": "Supported"`` …, the prefix every stage-1 output of these runs starts with),
with the run's own stage-1 model and prompt (``LLMBackend.score``, llama.cpp exactly), and
turns them into a probability vector.

Rows, by leave-one-out on the fit run (dev 100–149; the tuning and reporting ranges are not
read for the choice): logistic regressions over the stage-3 label scores plus (a) the one-hot
(the shipped kind), (b) the distribution instead, (c) both; C 0.3 / 1 / 3, with and without
balanced class weights. The pick and the switch rule are in ``RULE`` (written before the
first figure). With ``--report-run`` (dev 50–99) the pick and the shipped kind, each fitted on
all fit claims, are then applied to the report run: those rows come after the decision.

    python benchmarks/stage1_prior.py \
        --fit-run runs/quality_e2e/cpu_scored_reason_short_rp_raw_dev100-149/run \
        --report-run runs/quality_e2e/cpu_scored_reason_short_rp_cal_heldout50-99/run \
        --label cpu_scored_reason_short_rp_dev100-149

Writes ``benchmarks/results/stage1_prior_<label>.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from calibration_variants import DEFAULT_CLAIMS, judged, labels_of, qa_utilities, row, table  # noqa: E402

from sanctuary_local.calibrate import load_fit_data, run_config  # noqa: E402
from sanctuary_local.errors import UserError  # noqa: E402
from sanctuary_local.io.claims import read_claims  # noqa: E402
from sanctuary_local.llm.base import ScoreRequest  # noqa: E402
from sanctuary_local.stages.calibration import fit_logistic, softmax  # noqa: E402
from sanctuary_local.stages.hyde import build_hyde_request  # noqa: E402

STAGE1_LABELS = ("Supported", "Refuted", "Conflicting Evidence/Cherrypicking")
ANSWER_START = '{"label": "'
RULE = ("Pick: among the variants whose leave-one-out accuracy is at least the majority's on the fit range, the best "
        "leave-one-out macro-F1 (ties: higher accuracy, then smaller C). Switch the cpu default's calibration to it iff "
        "it uses the distribution and reaches LOO macro-F1 >= 0.334 (the shipped calibration's 0.314 + 0.02) and LOO "
        "accuracy >= 0.600 (0.620 - 0.02). Written 2026-11-26 07:30 UTC, before any figure of this benchmark; the "
        "report-range rows come after the decision and do not change it.")
SHIPPED = "scores + stage-1 one-hot, C 3.0"


def stage1_label_scores(run_dir: Path, claims_path: Path, indices: tuple[int, ...], backend: Any) -> dict[int, list[float]]:
    """log P(``{"label": "<label>"`` | stage-1 prompt) for each claim, with the run's stage-1 prompt."""
    cfg = run_config(run_dir)
    claims = {c.index: c for c in read_claims(claims_path)}
    cands = tuple(f"{ANSWER_START}{lab}\"" for lab in STAGE1_LABELS)
    reqs = [ScoreRequest(build_hyde_request(claims[i], cfg.hyde).messages, cands, tag=f"stage1_prior:{i}") for i in indices]
    out = {}
    for i, res in zip(indices, backend.score(reqs), strict=True):  # one call: the backend batches as it can
        if not res.ok:
            raise SystemExit(f"error: claim {i}: stage-1 label scoring failed: {res.error}")
        out[i] = list(res.logprobs)
    return out


def inputs(data: Any, scores: dict[int, list[float]]) -> dict[str, list[Any]]:
    """The three kinds of examples: one-hot (as shipped), distribution only, both.
    The distribution rides in the logistic model's extra-feature slot (``FitExample.stance``)."""
    dist = [replace(e, stance=tuple(softmax(scores[i]))) for i, e in zip(data.indices, data.examples, strict=True)]
    return {"one-hot": list(data.examples), "distribution": [replace(e, provisional=None) for e in dist],
            "one-hot + distribution": dist}


def variants() -> list[tuple[str, str, Any]]:
    out = []
    for c in (0.3, 1.0, 3.0):
        for bal in (False, True):
            for kind in ("one-hot", "distribution", "one-hot + distribution"):
                name = f"scores + stage-1 {kind}, C {c}" + (", balanced" if bal else "")
                out.append((name, kind, lambda ex, sha, h, c=c, b=bal: fit_logistic(ex, sha, h, c=c, balanced=b)))
    return out


def pick(rows: list[dict[str, Any]], majority_acc: float) -> dict[str, Any]:
    ok = [r for r in rows if r["accuracy"] >= majority_acc]
    return max(ok, key=lambda r: (r["macro_f1"], r["accuracy"], -float(r["row"].split("C ")[1].split(",")[0])))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fit-run", required=True, type=Path, help="scored run over the fit range (dev 100-149)")
    ap.add_argument("--report-run", type=Path, help="scored run over the reporting range (dev 50-99), read after the decision")
    ap.add_argument("--claims", type=Path, default=DEFAULT_CLAIMS, help="claims with gold labels")
    ap.add_argument("--label", default="cpu")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = ap.parse_args(argv)

    from sanctuary_local.llm import make_backend

    try:
        fit_data = load_fit_data(args.fit_run, args.claims)
        report = load_fit_data(args.report_run, args.claims) if args.report_run else None
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if report is not None and set(report.indices) & set(fit_data.indices):
        sys.exit("error: the fit and report runs share claims")
    cfg = run_config(args.fit_run)
    if report is not None and run_config(args.report_run).hyde != cfg.hyde:
        sys.exit("error: the two runs used different stage-1 settings")
    t0, backend = time.perf_counter(), make_backend(cfg.hyde.llm)
    try:
        s_fit = stage1_label_scores(args.fit_run, args.claims, fit_data.indices, backend)
        s_rep = stage1_label_scores(args.report_run, args.claims, report.indices, backend) if report else {}
    finally:
        backend.close()
    scoring_s = time.perf_counter() - t0
    sha, h = fit_data.model_sha256, fit_data.prompt_hash
    gold = [e.gold for e in fit_data.examples]
    qa_map = qa_utilities(args.fit_run, args.claims, fit_data.indices)
    qa = [qa_map[i] for i in fit_data.indices]
    argmax = [STAGE1_LABELS[max(range(3), key=lambda k: s_fit[i][k])] for i in fit_data.indices]
    base = [row("majority class (Refuted)", gold, ["Refuted"] * len(gold), [0.0] * len(gold)),
            row("stage-1 sampled label (as recorded)", gold, [e.provisional or "Refuted" for e in fit_data.examples], qa),
            row("stage-1 distribution, argmax", gold, argmax, qa)]
    ex_fit, rows, fits = inputs(fit_data, s_fit), [], {}
    for name, kind, fit_on in variants():
        fits[name] = (kind, fit_on)
        rows.append(row(name, gold, judged(fit_on, ex_fit[kind], None, sha, h), qa))
    chosen = pick(rows, base[0]["accuracy"])
    switch = "distribution" in chosen["row"] and chosen["macro_f1"] >= 0.334 and chosen["accuracy"] >= 0.600
    res: dict[str, Any] = {"fit_run": str(args.fit_run), "report_run": str(args.report_run) if report else None,
                           "rule": RULE, "pick": chosen["row"], "switch": switch, "fit_rows": base + rows,
                           "stage1_scores": {"fit": s_fit, "report": s_rep}, "scoring_s": round(scoring_s, 1),
                           "loadavg_end": [round(x, 2) for x in os.getloadavg()]}
    md = [f"# Stage 1's label distribution as the prior: {args.label}", "", f"Rule: {RULE}", "",
          f"## Fit range, leave-one-out ({len(gold)} claims of `{args.fit_run}`)", "",
          "AVeriTeC@0.25 uses the run's evidence; only labels differ between rows.", "", *table(base + rows), "",
          f"**Pick: {chosen['row']}** (LOO accuracy {chosen['accuracy']:.3f}, macro-F1 {chosen['macro_f1']:.3f}). "
          f"**Switch: {'yes' if switch else 'no'}.**", ""]
    if report is not None:
        rgold = [e.gold for e in report.examples]
        rqa_map = qa_utilities(args.report_run, args.claims, report.indices)
        rqa = [rqa_map[i] for i in report.indices]
        ex_rep = inputs(report, s_rep)
        rrows = [row("majority class (Refuted)", rgold, ["Refuted"] * len(rgold), [0.0] * len(rgold)),
                 row("stage-1 sampled label (as recorded)", rgold, [e.provisional or "Refuted" for e in report.examples], rqa)]
        for name in dict.fromkeys((SHIPPED, chosen["row"])):
            kind, fit_on = fits[name]
            rrows.append(row(f"{name}, fitted on all fit claims", rgold, labels_of(ex_rep[kind], fit_on(ex_fit[kind], sha, h)), rqa))
        res["report_rows"] = rrows
        md += [f"## Reporting range, after the decision ({len(rgold)} claims of `{args.report_run}`)", "", *table(rrows), ""]
    md += [f"Stage-1 label scoring: {scoring_s:.0f} s for {len(s_fit) + len(s_rep)} claims "
           f"(load average at the end {res['loadavg_end']}, 2 cores)."]
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"stage1_prior_{args.label}"
    stem.with_suffix(".json").write_text(json.dumps(res, indent=2) + "\n", "utf-8")
    stem.with_suffix(".md").write_text("\n".join(md) + "\n", "utf-8")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
