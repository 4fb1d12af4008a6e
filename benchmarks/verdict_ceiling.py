"""Where the trained verdict loses on the pipeline's evidence: reading or retrieval? A diagnostic.

One verdict model reads the same claims of finished pipeline runs with different evidence:

- **shipped**: the run's snippets as stage 3 orders them (best snippet of every question first, at
  most 10 pairs), each cut to the model's ``answer_words``: what the default reads;
- **gold sentences in the 10 pairs**: each of those pairs' snippets reduced to the gold answer
  sentences it contains (a sentence of the snippet counts when at least 80 % of a gold sentence's
  content words occur in it, ``verdict_focus.FOUND_SHARE``); pairs with none are dropped. A perfect
  reader of the retrieved text would see this;
- **gold sentences in every snippet**: the same over every snippet stage 2 kept (a perfect reader
  with no 10-pair cap);
- **claim only**: no evidence at all;
- **gold questions, no answers** and **gold answers, no questions**: the two halves of the gold
  evidence (the annotators wrote their questions knowing the verdict);
- **gold answers found, no questions**: the gold answers less those the annotators could not find
  (``UNANSWERABLE``, a text no page holds);
- **gold evidence**: the claims' gold questions and answers.

The oracle rows use the gold answers, so they are a ceiling, never a candidate. If the oracle rows
sit near gold evidence, the reading loses the gap; if they sit near the shipped row, retrieval does.
Run it on tuning folds only (pipeline dev 0-49 and 100-149), never dev 50-99:

    python benchmarks/verdict_ceiling.py --model packaged:verdict-tfidf-hyde2000 \\
        --pipeline-run runs/quality_e2e/cpu_trained_hyde_short_split_dev0-49/run \\
        --pipeline-run runs/quality_e2e/cpu_trained_hyde_short_dev100-149/run --label verdict_ceiling_tuning
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path

from bench_common import uptime, write_result
from verdict_focus import FOUND_SHARE, gold_sentences
from verdict_models import DEV, RESULTS, PipelineRun, _cell, _m

from sanctuary_local.records import REFUTED
from sanctuary_local.verdict_model.decision import decide
from sanctuary_local.verdict_model.inputs import (_SENTENCE_END, UNANSWERABLE, QAPair, VerdictInput, _content_words,
                                                  from_gold, from_queries)
from sanctuary_local.verdict_model.store import load_model, resolve

READINGS = ("shipped", "gold sentences in the 10 pairs", "gold sentences in every snippet", "claim only",
            "gold questions, no answers", "gold answers, no questions", "gold answers found, no questions",
            "gold evidence")
HELD_OUT = range(50, 100)


def gold_only(text: str, gold: list[set[str]]) -> str:
    """The sentences of ``text`` that contain a gold answer sentence (by content words)."""
    keep = []
    for s in _SENTENCE_END.split(text.strip()):
        have = _content_words(s)
        if have and any(len(g & have) >= FOUND_SHARE * len(g) for g in gold):
            keep.append(s)
    return " ".join(keep)


def oracle(x: VerdictInput, gold: list[set[str]]) -> VerdictInput:
    """``x`` with every answer reduced to its gold sentences; pairs left empty are dropped."""
    pairs = tuple(QAPair(p.question, t, p.url) for p in x.pairs if (t := gold_only(p.answer, gold)))
    return VerdictInput(x.claim, pairs, x.label)


def readings(pipe: PipelineRun) -> dict[str, list[VerdictInput]]:
    """Each reading's input for every claim of the run, in the run's order."""
    out: dict[str, list[VerdictInput]] = {r: [] for r in READINGS}
    for claim, ev in zip(pipe.claims, pipe.evidence):
        gold = gold_sentences(claim)
        shipped = from_queries(claim.text, ev.queries, label=claim.gold_label)
        every = from_queries(claim.text, ev.queries, max_pairs=10_000, label=claim.gold_label)
        out["shipped"].append(shipped)
        out["gold sentences in the 10 pairs"].append(oracle(shipped, gold))
        out["gold sentences in every snippet"].append(oracle(every, gold))
        out["claim only"].append(VerdictInput(claim.text, (), claim.gold_label))
        gold_x = from_gold(claim)
        out["gold questions, no answers"].append(
            VerdictInput(claim.text, tuple(QAPair(p.question, "") for p in gold_x.pairs), claim.gold_label))
        out["gold answers, no questions"].append(
            VerdictInput(claim.text, tuple(QAPair("", p.answer) for p in gold_x.pairs), claim.gold_label))
        out["gold answers found, no questions"].append(VerdictInput(
            claim.text, tuple(QAPair("", p.answer) for p in gold_x.pairs if p.answer != UNANSWERABLE), claim.gold_label))
        out["gold evidence"].append(gold_x)
    return out


def score(model: str, runs: list[Path]) -> dict:
    """Accuracy / macro-F1 of every reading on each run and on the runs pooled."""
    loaded = load_model(str(resolve(model)))
    per_run, pooled_gold, pooled = {}, [], {r: [] for r in READINGS}
    for run in runs:
        pipe = PipelineRun(run, DEV)
        if set(pipe.indices) & set(HELD_OUT):
            raise SystemExit(f"{run}: holds held-out claims (dev 50-99); this diagnostic reads tuning folds only")
        row = {"majority": _m(pipe.gold, [REFUTED] * len(pipe.gold))}
        for name, xs in readings(pipe).items():
            labels = decide(loaded.predict_proba(xs))
            row[name] = {**_m(pipe.gold, labels), "pairs_per_claim": round(sum(len(x.pairs) for x in xs) / len(xs), 1)}
            pooled[name] += labels
        per_run[pipe.name] = row
        pooled_gold += pipe.gold
    both = {"majority": _m(pooled_gold, [REFUTED] * len(pooled_gold))}
    both.update({name: _m(pooled_gold, labels) for name, labels in pooled.items()})
    return {"model": model, "model_sha256": loaded.sha256, "runs": per_run, "pooled": both}


def to_markdown(r: dict, meta: dict) -> str:
    names = list(r["runs"])
    lines = [f"# Where the trained verdict loses: reading or retrieval ({meta['date']})", "",
             f"Model `{r['model']}` (files sha256 {r['model_sha256'][:16]}). Load: {meta['load']}. A diagnostic on "
             "tuning folds only; the oracle rows read the gold answers, so they are ceilings, never candidates.", "",
             f"    {meta['command']}", "",
             "| evidence read | " + " | ".join(f"{n}: acc / macro-F1 (pairs per claim)" for n in names)
             + " | pooled acc / macro-F1 |", "|---|" + "---|" * (len(names) + 1)]
    for name in ("majority", *READINGS):
        cells = []
        for n in names:
            m = r["runs"][n][name]
            cells.append(_cell(m) + (f" ({m['pairs_per_claim']})" if "pairs_per_claim" in m else ""))
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {_cell(r['pooled'][name])} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="packaged:verdict-tfidf-hyde2000", help="a model directory or packaged:NAME")
    ap.add_argument("--pipeline-run", type=Path, action="append", required=True,
                    help="a finished cpu run on a tuning fold (repeatable)")
    ap.add_argument("--label", default="verdict_ceiling_tuning")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    r = score(args.model, args.pipeline_run)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load": uptime(), "cpus": os.cpu_count(),
            "command": "python benchmarks/verdict_ceiling.py " + shlex.join(sys.argv[1:])}
    write_result(args.out, args.label, meta, r, to_markdown(r, meta))


if __name__ == "__main__":
    main()
