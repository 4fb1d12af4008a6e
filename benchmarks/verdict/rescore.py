"""Stage 3 alone, recomputed by this code on the stage-1/2 records of a finished run, scored
with the official measures: accuracy, macro-F1 and AVeriTeC@0.25 (Hungarian METEOR of the
evidence against gold), beside the majority class and the model on gold evidence.

For a trained verdict (no LLM) this takes seconds. ``run --reuse-from`` refuses a run made by
other code (its records may differ); stage 3 here is the current code's, and stages 1-2 are the
source run's records as they are (the source's code is named in the result).

    python benchmarks/verdict/rescore.py --run runs/quality_e2e/LABEL/run --indices 50:100 \
        --model packaged:verdict-tfidf --label verdict_rescore_LABEL
"""

from __future__ import annotations

import argparse
import json
import os
import time
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: benchmarks.* and sanctuary_local import from it
from benchmarks.common import parse_range, write_result
from benchmarks.verdict.models import DEV, RESULTS, PipelineRun, _cell, _m

from sanctuary_local.io.claims import read_claims
from sanctuary_local.records import REFUTED
from sanctuary_local.verdict_model.decision import decide
from sanctuary_local.verdict_model.evaluate import labelled
from sanctuary_local.verdict_model.store import load_model, resolve


def rescore(run: Path, indices: tuple[int, int], model: str) -> dict:
    pipe = PipelineRun(run, DEV)
    a, b = indices
    if pipe.indices != list(range(a, b)):
        raise SystemExit(f"{run}: has claims {pipe.indices[0]}-{pipe.indices[-1]}, not {a}-{b - 1}")
    directory = resolve(model)
    preds, per = pipe.predict(directory)
    labels = [p.label for p in preds]
    xs = labelled(read_claims(DEV)[a:b], f"dev {a}:{b}")
    loaded = load_model(str(directory))
    gold_labels = decide(loaded.predict_proba(xs))
    state = json.loads((run / "run_state.json").read_text())
    return {
        "run": str(run), "source_code": (state.get("fingerprint") or {}).get("code"), "model": model,
        "model_sha256": loaded.sha256, "indices": f"{a}:{b}",
        "system": _m(pipe.gold, labels, pipe.hits(labels, preds)),
        "majority": _m(pipe.gold, [REFUTED] * len(labels), [0.0] * len(labels)),
        "gold_evidence": _m([x.label or "" for x in xs], gold_labels),
        "predicted": {lab: labels.count(lab) for lab in sorted(set(labels))},
        "stage3_s_per_claim": round(per, 4),
    }


def to_markdown(r: dict, meta: dict) -> str:
    keys = ("accuracy", "macro_f1", "averitec")
    return "\n".join([
        f"# Stage 3 rescored: {meta['label']} ({meta['date']})", "",
        f"Model `{r['model']}` (files sha256 {r['model_sha256'][:16]}), dev claims {r['indices']}; stages 1-2: the records "
        f"of `{r['run']}` (made by code {r['source_code']}), stage 3 recomputed by this code. "
        f"Machine: {meta['cpus']} CPUs, load average {meta['load']}.", "",
        "| row | accuracy / macro-F1 / AVeriTeC@0.25 |", "|---|---|",
        f"| system (the run's stages 1-2, this stage 3) | {_cell(r['system'], keys)} |",
        f"| majority class (Refuted) | {_cell(r['majority'], keys)} |",
        f"| the model on gold evidence (accuracy / macro-F1) | {_cell(r['gold_evidence'])} |", "",
        f"Labels given: {r['predicted']}. Stage 3: {r['stage3_s_per_claim']} s per claim.", ""])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", type=Path, required=True, help="a finished run (its stage-1/2 records are read)")
    ap.add_argument("--indices", required=True, help="the run's claims a:b")
    ap.add_argument("--model", default="packaged:verdict-tfidf")
    ap.add_argument("--label", required=True)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    a, b = parse_range(args.indices)
    r = rescore(args.run, (a, b), args.model)
    meta = {"label": args.label, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count(),
            "load": [round(x, 2) for x in os.getloadavg()]}
    write_result(args.out, args.label, meta, r, to_markdown(r, meta))


if __name__ == "__main__":
    main()
