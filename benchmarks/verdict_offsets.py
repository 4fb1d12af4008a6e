"""A verdict model read with per-label offsets, judged on blind folds (rule 2 of 2026-11-28).

Two ways to set the offsets added to a model's log-probabilities before the argmax
(``verdict_model.decision``; Refuted's offset stays 0):

- **fitted** (XR): ``decision.fit_offsets`` on the pipeline run of dev 100-149 (macro-F1, then
  accuracy), as ``verdict-model fit-rule`` and ``verdict_models.py``'s rule row do. On that fold
  itself it is scored by two-fold cross-fitting: fitted on the claims at even positions and
  scored on the odd ones, and the reverse, pooled.
- **prior** (XP): log(count of the label / count of Refuted) in the training file, fitted on no dev
  claim: a model trained with balanced label weights reads every label as equally common, and
  these offsets give it back the training prior.

Columns, each beside the default (argmax) and the majority class: pipeline dev 0-49 (accuracy,
macro-F1, AVeriTeC@0.25), retrieved dev 150-249 (``verdict-model evidence`` with the gold
questions; outside the fit fold), pipeline dev 100-149, and the pooled macro-F1 of the first
two. Dev 50-99 is never read.

    python benchmarks/verdict_offsets.py --model runs/vm/gpu/x_model --train ../shared/data/averitec/train.json \\
        --pipeline-run runs/quality_e2e/cpu_trained_hyde_short_split_dev0-49/run \\
        --fit-run runs/quality_e2e/cpu_trained_hyde_short_dev100-149/run \\
        --retrieved-dev runs/vm/dev100-249_evidence.jsonl --label verdict_offsets_x
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from verdict_models import DEV, RESULTS, PipelineRun, _m

from sanctuary_local.io.claims import read_claims
from sanctuary_local.records import LABELS, REFUTED
from sanctuary_local.verdict_model.decision import decide, fit_offsets
from sanctuary_local.verdict_model.evidence import inputs_from_evidence, read_evidence
from sanctuary_local.verdict_model.store import load_model, resolve


def prior_offsets(train: Path) -> list[float]:
    """log(count / Refuted's count) per label, from the training file's gold labels (every entry's
    ``label``, as the issue counts them: 849 / 1,742 / 282 / 195 in AVeriTeC train)."""
    counts = Counter(e.get("label") for e in json.loads(train.read_text(encoding="utf-8")) if isinstance(e, dict))
    return [float(np.log(counts[lab] / counts[REFUTED])) for lab in LABELS]


def cross_fitted(probs: np.ndarray, gold: list[str]) -> list[str]:
    """Labels of the fit fold itself with offsets fitted on its other half (even/odd positions)."""
    out: list[str] = [""] * len(gold)
    for part in (0, 1):
        fit = [i for i in range(len(gold)) if i % 2 != part]
        test = [i for i in range(len(gold)) if i % 2 == part]
        offsets = fit_offsets(probs[fit], [gold[i] for i in fit])
        for i, lab in zip(test, decide(probs[test], offsets)):
            out[i] = lab
    return out


def _probs(run: PipelineRun, model_dir: Path) -> tuple[np.ndarray, list[Any]]:
    preds, _ = run.predict(model_dir)
    return np.array([p.meta["label_scores"]["probabilities"] for p in preds]), preds


def _row(name: str, pipe: PipelineRun, fit: PipelineRun, ret_gold: list[str], cells: dict[str, list[str]],
         preds: list[Any], offsets: list[float] | None) -> dict[str, Any]:
    row: dict[str, Any] = {"candidate": name, "offsets": [round(x, 3) for x in offsets] if offsets else None}
    row["pipeline_0-49"] = _m(pipe.gold, cells["pipe"], pipe.hits(cells["pipe"], preds))
    row["retrieved_150-249"] = _m(ret_gold, cells["ret"])
    row["pipeline_100-149"] = _m(fit.gold, cells["fit"])
    row["pooled_0-49_150-249"] = _m(pipe.gold + ret_gold, cells["pipe"] + cells["ret"])
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="the model read with offsets (a directory or packaged:NAME)")
    ap.add_argument("--default", default="packaged:verdict-tfidf-hyde", help="the default it is judged against")
    ap.add_argument("--train", type=Path, required=True, help="the training file whose label counts give the prior")
    ap.add_argument("--pipeline-run", type=Path, required=True, help="a finished cpu run on dev 0-49")
    ap.add_argument("--fit-run", type=Path, required=True, help="a finished cpu run on dev 100-149 (the fit fold)")
    ap.add_argument("--retrieved-dev", type=Path, required=True, help="verdict-model evidence for dev 100-249")
    ap.add_argument("--label", default="verdict_offsets")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    model, default = resolve(args.model), resolve(args.default)
    prior = prior_offsets(args.train)  # before any work: a bad file fails at once
    pipe, fit = PipelineRun(args.pipeline_run, DEV), PipelineRun(args.fit_run, DEV)
    if any(50 <= i < 100 for i in pipe.indices + fit.indices):
        raise SystemExit("dev 50-99 is the held-out range: it is never read here")
    ret = inputs_from_evidence(read_claims(DEV)[150:250], read_evidence(args.retrieved_dev))
    ret_gold = [x.label or "" for x in ret]

    d_pipe, d_preds = _probs(pipe, default)
    d_fit, _ = _probs(fit, default)
    dm = load_model(str(default))
    rows = [_row(f"majority class ({REFUTED})", pipe, fit, ret_gold,
                 {"pipe": [REFUTED] * len(pipe.gold), "ret": [REFUTED] * len(ret), "fit": [REFUTED] * len(fit.gold)},
                 d_preds, None)]
    rows[0]["pipeline_0-49"]["averitec"] = 0.0
    rows.append(_row(f"default {args.default} (argmax)", pipe, fit, ret_gold,
                     {"pipe": decide(d_pipe), "ret": decide(dm.predict_proba(ret)), "fit": decide(d_fit)}, d_preds, None))

    x_pipe, x_preds = _probs(pipe, model)
    x_fit, _ = _probs(fit, model)
    x_ret = load_model(str(model)).predict_proba(ret)
    rows.append(_row(f"{args.model} (argmax)", pipe, fit, ret_gold,
                     {"pipe": decide(x_pipe), "ret": decide(x_ret), "fit": decide(x_fit)}, x_preds, None))
    fitted = fit_offsets(x_fit, fit.gold)
    rows.append(_row("XR: offsets fitted on pipeline dev 100-149 (that fold cross-fitted)", pipe, fit, ret_gold,
                     {"pipe": decide(x_pipe, fitted), "ret": decide(x_ret, fitted), "fit": cross_fitted(x_fit, fit.gold)},
                     x_preds, fitted))
    rows.append(_row("XP: offsets log(train count / Refuted count), fitted on nothing", pipe, fit, ret_gold,
                     {"pipe": decide(x_pipe, prior), "ret": decide(x_ret, prior), "fit": decide(x_fit, prior)},
                     x_preds, prior))
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count(),
            "load": [round(x, 2) for x in os.getloadavg()], "pipeline_run": pipe.name, "fit_run": fit.name,
            "retrieved_dev": f"{args.retrieved_dev} (dev 150-249, {len(ret)} claims with snippets)",
            "model": str(model), "default": str(default)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.label}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    md = [f"# {args.model} read with per-label offsets ({meta['date']})", "",
          f"Machine: {meta['cpus']} CPUs, load average {meta['load']} at the end. Pipeline dev 0-49: {pipe.name}; "
          f"pipeline dev 100-149 (the fit fold): {fit.name}; retrieved: {meta['retrieved_dev']}. Dev 50-99 is never read.",
          "", "| candidate | offsets (S / R / NEE / C) | pipeline dev 0-49 acc / macro-F1 / AVeriTeC@0.25 | "
          "retrieved dev 150-249 acc / macro-F1 | pipeline dev 100-149 acc / macro-F1 | pooled 0-49 + 150-249 acc / macro-F1 |",
          "|---|---|---|---|---|---|"]
    for r in rows:
        cell = lambda m, keys=("accuracy", "macro_f1"): " / ".join(f"{m[k]:.3f}" for k in keys)  # noqa: E731
        md.append(f"| {r['candidate']} | {' / '.join(f'{x:+.2f}' for x in r['offsets']) if r['offsets'] else '-'} | "
                  f"{cell(r['pipeline_0-49'], ('accuracy', 'macro_f1', 'averitec'))} | {cell(r['retrieved_150-249'])} | "
                  f"{cell(r['pipeline_100-149'])} | {cell(r['pooled_0-49_150-249'])} |")
    md += ["", "The command: see this script's docstring (`benchmarks/verdict_offsets.py`)."]
    (args.out / f"{args.label}.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
