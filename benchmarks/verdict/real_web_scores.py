"""The real-web table with the AVeriTeC score: each model re-labels the FEVER-8 baseline's dev
submission through the real commands, scored as the official scorer scores.

For each verdict model, ``sanctuary-local run --evidence-from submission_part_a.csv`` (stage 3
alone on the baseline's 10 real-web QA pairs per claim, dev 0-249), then ``sanctuary-local eval``
on dev 50-99 (held out) and 0-249 (which includes the tuning and fit claims); the baseline's own
submission (HerO-8B's labels on the same evidence) is scored the same way. The evidence is the
same in every row, so the AVeriTeC score (questions and answers matched by METEOR, the label
counted where the evidence scores at least 0.25) differs only by the labels.

    python benchmarks/verdict/real_web_scores.py
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common import DEFAULT_CLAIMS, results_dir, uptime, write_result  # noqa: E402
from benchmarks.verdict.real_web import DEV_EVIDENCE  # noqa: E402

MODELS = {"default `packaged:verdict-pairs-stack`": "packaged:verdict-pairs-stack",
          "former default `packaged:verdict-web-stack`": "packaged:verdict-web-stack"}
RANGES = {"dev 50-99 (held out)": "50:100", "dev 0-249 (includes tuned and fit claims)": "0:250"}
CLI = [sys.executable, "-m", "sanctuary_local.cli"]


def _eval(pred: Path, claims: Path, rng: str, out: Path) -> dict:
    subprocess.run([*CLI, "eval", "--pred", str(pred), "--gold", str(claims), "--claims-range", rng, "--out", str(out)],
                   check=True, capture_output=True, text=True)
    m = json.loads((out / "metrics.json").read_text())
    return {"macro_f1": m["labels"]["macro_f1"], "accuracy": m["labels"]["accuracy"],
            "averitec": m["meteor"]["averitec_score"], "n": m["n_claims"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--claims", type=Path, default=DEFAULT_CLAIMS)
    ap.add_argument("--label", default="real_web_scores")
    args = ap.parse_args()

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        preds = {"HerO-8B: the baseline's own submission": DEV_EVIDENCE}
        for name, model in MODELS.items():
            run = Path(tmp) / model.split(":")[-1]
            subprocess.run([*CLI, "run", "--claims", str(args.claims), "--claims-range", "0:250", "--evidence-from",
                            str(DEV_EVIDENCE), "--out", str(run), "--set", f"verdict.trained_model={model}"],
                           check=True, capture_output=True, text=True)
            preds[name] = run
        for name, pred in preds.items():
            for rname, rng in RANGES.items():
                rows.append({"row": name, "range": rname,
                             **_eval(pred, args.claims, rng, Path(tmp) / f"eval{len(rows)}")})
    from sanctuary_local.config.settings import load_config
    from sanctuary_local.evaluation.labels import label_metrics
    from sanctuary_local.io.claims import read_claims
    from sanctuary_local.records import REFUTED

    gold = [c.gold_label or "" for c in read_claims(args.claims)]
    for rname, rng in RANGES.items():
        lo, hi = (int(x) for x in rng.split(":"))
        m = label_metrics(gold[lo:hi], [REFUTED] * (hi - lo))
        rows.append({"row": "majority class (Refuted)", "range": rname, "macro_f1": m.macro_f1, "accuracy": m.accuracy,
                     "averitec": 0.0, "n": hi - lo})  # no evidence: no claim reaches the score's evidence bar
    meta = {"claims": str(args.claims), "evidence": str(DEV_EVIDENCE), "uptime": uptime()}
    lines = ["# Real-web evidence with the AVeriTeC score: the baseline's dev submission re-labelled", "",
             f"Evidence: `{DEV_EVIDENCE.name}` (the FEVER-8 baseline's 10 real-web QA pairs per claim). Each model "
             "re-labels it with `run --evidence-from`; `eval` scores each range. Machine: "
             f"`{meta['uptime']}`.", "",
             "| row | claims | macro-F1 | AVeriTeC@0.25 | accuracy |", "|---|---|---|---|---|",
             *(f"| {r['row']} | {r['range']} | {r['macro_f1']:.3f} | {r['averitec']:.3f} | {r['accuracy']:.3f} |"
               for r in rows), ""]
    write_result(results_dir(__file__), args.label, meta, {"model": load_config("cpu").verdict.trained_model, "rows": rows},
                 "\n".join(lines))


if __name__ == "__main__":
    main()
