"""A probe: should a question stage 2 found no snippet for read as the annotators' marker?

The gold evidence the verdict models train on says "No answer could be found." for a question
the annotators could not answer, and the models tie that text to *Not Enough Evidence*. At run
time a question without snippets adds no pair at all. This rescoring reads the stage-1/2
records of a finished run with the shipped model twice: as stage 3 reads them, and with each
question that has no snippet added as (question, "No answer could be found."). It is meant for
the fit range (dev 100-149); no decision is taken on any other claims.

    python benchmarks/verdict_unanswerable_probe.py --run runs/quality_e2e/cpu_trained_hyde_short_dev100-149/run \
        --model packaged:verdict-tfidf-hyde2000 --label verdict_unanswerable_probe_dev100-149
"""

from __future__ import annotations

import argparse
import os
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

from bench_common import write_result
from verdict_models import DEV, RESULTS, PipelineRun, _cell, _m

from sanctuary_local.records import LABELS, REFUTED
from sanctuary_local.verdict_model.inputs import UNANSWERABLE, QAPair, from_queries
from sanctuary_local.verdict_model.store import load_model, resolve

MAX_PAIRS = 10  # stage 3's (stages/verdict/trained.py)


def _inputs(pipe: PipelineRun, marker: bool) -> list:
    xs = []
    for claim, ev in zip(pipe.claims, pipe.evidence):
        x = from_queries(claim.text, ev.queries, frozenset(), MAX_PAIRS, claim.gold_label)
        if marker:
            empty = tuple(QAPair(qe.query.question, UNANSWERABLE) for qe in ev.queries if not qe.snippets)
            x = replace(x, pairs=(x.pairs + empty)[:MAX_PAIRS])
        xs.append(x)
    return xs


def probe(run: Path, model: str) -> dict:
    pipe = PipelineRun(run, DEV)
    loaded = load_model(str(resolve(model)))
    questions = sum(len(ev.queries) for ev in pipe.evidence)
    empty = sum(1 for ev in pipe.evidence for qe in ev.queries if not qe.snippets)
    rows = {}
    for name, marker in (("as stage 3 reads it", False), ("questions without a snippet read as unanswerable", True)):
        labels = [LABELS[i] for i in loaded.predict_proba(_inputs(pipe, marker)).argmax(1)]
        rows[name] = {**_m(pipe.gold, labels), "predicted": dict(Counter(labels))}
    return {"run": str(run), "model": model, "model_sha256": loaded.sha256, "claims": len(pipe.claims),
            "questions": questions, "questions_without_snippet": empty, "rows": rows,
            "majority": _m(pipe.gold, [REFUTED] * len(pipe.gold))}


def to_markdown(r: dict, meta: dict) -> str:
    lines = [f"# Unanswered questions as the annotators' marker: {meta['label']} ({meta['date']})", "",
             f"Model `{r['model']}` (files sha256 {r['model_sha256'][:16]}), the stage-1/2 records of `{r['run']}` "
             f"({r['claims']} claims; {r['questions_without_snippet']} of {r['questions']} questions have no snippet). "
             f"Machine: {meta['cpus']} CPUs, load average {meta['load']}.", "",
             "| stage 3 reads | accuracy / macro-F1 | labels given |", "|---|---|---|"]
    lines += [f"| {name} | {_cell(row)} | {row['predicted']} |" for name, row in r["rows"].items()]
    lines += [f"| majority class (Refuted) | {_cell(r['majority'])} | – |", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", type=Path, required=True, help="a finished run (its stage-1/2 records are read)")
    ap.add_argument("--model", default="packaged:verdict-tfidf-hyde2000")
    ap.add_argument("--label", required=True)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    r = probe(args.run, args.model)
    meta = {"label": args.label, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count(),
            "load": [round(x, 2) for x in os.getloadavg()]}
    write_result(args.out, args.label, meta, r, to_markdown(r, meta))


if __name__ == "__main__":
    main()
