"""Issue 66 (b): the per-pair cross-encoder alone and as a stack's 4th member, on real-web evidence.

The pair encoder (``verdict-model train --per-pair``, ``verdict_model.pair_encoder``) is read
on the FEVER-8 baseline's real-web evidence (``submission_part_a.csv``) for the tuning claims
(dev 0-49 and 150-249, where its pooling is chosen) and the fit claims (dev 100-149, where the
4th member's stack weight is fitted), beside the shipped default ``packaged:verdict-web-stack``
and its three members. Only those 200 claims are read: dev 50-99 is never scored here.

Rows: the default stack; the pair encoder with each pooling; the stack of the three shipped
members plus the pair encoder at equal weights; the same with the pair encoder's weight fitted
on dev 100-149 (a grid, the others at 1). Both stacks are written by ``verdict_model.train.stack``
(what ``verdict-model stack`` runs) and read back with ``load_model``. All labels are argmax
(the default stack has no decision rule).

    python benchmarks/verdict/pair_encoder.py --model runs/pair_encoder/model --stacks runs/pair_encoder
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from benchmarks.common import DEFAULT_CLAIMS, results_dir, uptime, write_result  # noqa: E402
from benchmarks.verdict.real_web import DEV_EVIDENCE, FIT, TUNE, _stage3_seconds  # noqa: E402

DEFAULT = "packaged:verdict-web-stack"
SHIPPED_MEMBERS = ("packaged:verdict-tfidf-web", "packaged:verdict-tfidf-claim", "packaged:verdict-stance-web")
WEIGHTS = (0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0)


def _scores(gold: list[str], probs: np.ndarray, where: dict[str, list[int]]) -> dict:
    from sanctuary_local.verdict_model.decision import decide
    from sanctuary_local.verdict_model.evaluate import metrics_of

    pred = decide(probs)
    return {name: metrics_of([gold[i] for i in idx], [pred[i] for i in idx]) for name, idx in where.items()}


def _fit_weight(members: list[np.ndarray], pair: np.ndarray, gold: list[str], fit: list[int]) -> float:
    """The pair encoder's weight (others 1) with the best macro-F1, then accuracy, on ``fit``;
    ties to the smaller weight."""
    from sanctuary_local.verdict_model.stack import combine

    best, best_w = (-1.0, -1.0), WEIGHTS[0]
    for w in WEIGHTS:
        p = combine([m[fit] for m in members] + [pair[fit]], [1.0, 1.0, 1.0, w])
        s = _scores([gold[i] for i in fit], p, {"fit": list(range(len(fit)))})["fit"]
        if (s["macro_f1"], s["accuracy"]) > best:
            best, best_w = (s["macro_f1"], s["accuracy"]), w
    return best_w


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="The pair-encoder model directory")
    ap.add_argument("--stacks", type=Path, required=True, help="Where to write the two 4-member stacks")
    ap.add_argument("--claims", type=Path, default=DEFAULT_CLAIMS)
    ap.add_argument("--label", default="pair_encoder")
    args = ap.parse_args()

    from sanctuary_local.io.claims import read_claims
    from sanctuary_local.verdict_model.external import external_inputs
    from sanctuary_local.verdict_model.pair_encoder import pool
    from sanctuary_local.verdict_model.store import load_model
    from sanctuary_local.verdict_model.train import stack

    claims = read_claims(args.claims)
    chosen = [claims[i] for i in (*TUNE, *FIT)]  # dev 50-99 is never read
    xs, _ = external_inputs(claims, args.claims, DEV_EVIDENCE, chosen)
    gold = [x.label or "" for x in xs]
    where = {"tune": list(range(len(TUNE))), "fit": list(range(len(TUNE), len(chosen)))}
    rows, timing = [], xs[:50]  # dev 0-49 for stage-3 seconds
    default = load_model(DEFAULT)
    rows.append({"name": f"{DEFAULT} (current default)", **_scores(gold, default.predict_proba(xs), where),
                 "stage3_s_per_claim": round(_stage3_seconds(default, timing), 4)})
    members = [load_model(m).predict_proba(xs) for m in SHIPPED_MEMBERS]
    pm = load_model(args.model)
    per_pair = pm.pair_proba(xs)
    for how in ("logmean", "mean"):
        p = np.array([pool(q, how) for q in per_pair])
        rows.append({"name": f"pair encoder alone, pooling {how}" + (" (its card's)" if how == pm.pair_pool else ""),
                     **_scores(gold, p, where)})
    rows[-2 if pm.pair_pool == "logmean" else -1]["stage3_s_per_claim"] = round(_stage3_seconds(pm, timing), 4)
    w = _fit_weight(members, pm.predict_proba(xs), gold, where["fit"])
    model_path = str(Path(args.model).resolve())
    for name, weight in (("stack4_equal", 1.0), ("stack4_fitted", w)):
        out = args.stacks / name
        stack(out, [*((m, 1.0) for m in SHIPPED_MEMBERS), (model_path, weight)],
              command=f"sanctuary-local verdict-model stack --out {out} " + " ".join(
                  f"--member {m}" for m in SHIPPED_MEMBERS) + f" --member {model_path}={weight:g}")
        sm = load_model(str(out))
        rows.append({"name": f"default's 3 members + pair encoder ×{weight:g} ({name}, {out})",
                     **_scores(gold, sm.predict_proba(xs), where),
                     "stage3_s_per_claim": round(_stage3_seconds(sm, timing), 4)})
    size = sum(f.stat().st_size for f in Path(args.model).glob("*.safetensors"))
    meta = {"claims": str(args.claims), "dev_evidence": str(DEV_EVIDENCE), "model": model_path,
            "uptime": uptime(), "fitted_weight": w, "weights_mb_fp16": round(size / 1e6, 1)}
    write_result(results_dir(__file__), args.label, meta, {"rows": rows}, markdown(rows, meta))


def _cells(m: dict) -> str:
    f1 = " / ".join(f"{v['f1']:.2f}" for v in m["per_class"].values())
    return f"{m['macro_f1']:.3f} | {m['accuracy']:.3f} | {f1}"


def markdown(rows: list[dict], meta: dict) -> str:
    lines = ["# Issue 66 (b): per-pair cross-encoder on real-web evidence", "",
             f"Model: `{meta['model']}` ({meta['weights_mb_fp16']} MB of fp16 weights). Tuning = dev 0-49 + 150-249 "
             f"(150 claims), fit = dev 100-149 (50; the 4th member's weight, {meta['fitted_weight']:g}, is fitted "
             "there). Labels by argmax. Stage-3 seconds per claim: the label and the occlusion justification on "
             f"dev 0-49. Machine: `{meta['uptime']}`.", "",
             "| row | tuning: macro-F1 | acc | F1 S / R / NEE / C | fit: macro-F1 | acc | F1 S / R / NEE / C | stage 3 s/claim |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['name']} | {_cells(r['tune'])} | {_cells(r['fit'])} | {r.get('stage3_s_per_claim', '–')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
