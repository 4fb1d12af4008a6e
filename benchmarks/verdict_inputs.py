"""Two changes to what the TF-IDF verdict reads and weighs, judged on every tuning fold.

- **no questions**: each evidence pair is read as its answer alone. At run time the questions
  are stage 1's (written by a 1.5B model); in training they are the annotators' (the gold ones,
  and the queries of the retrieved evidence), so their words differ between the two;
- **class weights^0.5**: each label weighted by the square root of its balanced weight, between
  the default's balanced weights (which reach the rare labels) and none (which favours
  *Refuted*, the majority);
- **both**.

Each row fits the shipped default's settings and training inputs (``verdict_tfidf_sweep.py``'s
default row: gold evidence + the retrieved evidence of ``--extra``, C, pairs and words) with
its change, and scores the same folds: pipeline dev 0-49 and 100-149 (stage 3's view of
finished ``cpu`` runs), retrieved dev 100-249 and the selection figure (pipeline 0-49 +
retrieved 100-249). Labels are the argmax. Dev 50-99 is never read.

    python benchmarks/verdict_inputs.py --pipeline-run runs/quality_e2e/cpu_trained_hyde_short_split_dev0-49/run \\
        --fit-run runs/quality_e2e/cpu_trained_dev100-149/run --retrieved-dev runs/vm/dev100-249_evidence.jsonl \\
        --extra ret483=runs/vm/train_evidence.jsonl --notes RULE.md
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from typing import Any

import numpy as np

import verdict_tfidf_sweep as sweep

from sanctuary_local.records import LABELS  # noqa: E402
from sanctuary_local.verdict_model.base import TrainSettings, class_weights  # noqa: E402
from sanctuary_local.verdict_model.evidence import inputs_from_evidence  # noqa: E402
from sanctuary_local.verdict_model.inputs import VerdictInput, render  # noqa: E402
from sanctuary_local.verdict_model.tfidf import _vectorizer  # noqa: E402

#: Each row: (name, read the questions?, power of the balanced class weights).
VARIANTS = (("default", True, 1.0), ("no questions", False, 1.0),
            ("class weights^0.5", True, 0.5), ("no questions + class weights^0.5", False, 0.5))


def answers_only(x: VerdictInput) -> VerdictInput:
    """The input with every pair's question left out (``render`` then reads ``Q:  A: answer``)."""
    return replace(x, pairs=tuple(replace(p, question="") for p in x.pairs))


def fit(xs: list[VerdictInput], ts: TrainSettings, pairs: int, power: float) -> tuple[Any, Any]:
    """``verdict_model.tfidf.fit`` with the balanced class weights raised to ``power``."""
    from sklearn.linear_model import LogisticRegression

    vec = _vectorizer()
    features = vec.fit_transform([render(x, ts.answer_words, pairs) for x in xs])
    weights = class_weights([x.label for x in xs], "balanced") ** power
    lr = LogisticRegression(C=ts.c, max_iter=2000, random_state=ts.seed,
                            class_weight={i: float(w) for i, w in enumerate(weights)})
    lr.fit(features, np.array([LABELS.index(x.label) for x in xs]))
    return vec, lr


def rows(sw: sweep.Sweep, extras: list[str]) -> list[dict[str, Any]]:
    """The majority, the default and each variant, fitted on the default's training inputs."""
    extra_name = extras[0]
    s = sweep.settings(argparse.Namespace(c=[], pairs=[], words=[]), [extra_name])[0]
    if sweep.SHIPPED["class_weight"] != "balanced":
        raise SystemExit("the shipped default no longer uses balanced class weights: this table assumes it does")
    ts = TrainSettings(base="tfidf", c=s.c, answer_words=s.words, seed=sweep.SHIPPED["seed"])
    train = sw.gold + inputs_from_evidence(sw.claims, sw.extras[extra_name], max_pairs=s.pairs)
    tests = sw.tests(s.pairs)
    out = [sw.majority()]
    for name, questions, power in VARIANTS:
        t0 = time.perf_counter()
        view = (lambda x: x) if questions else answers_only
        vec, lr = fit([view(x) for x in train], ts, s.pairs, power)
        out.append(sweep.scored(name, tests, lambda xs, vec=vec, lr=lr, view=view: [
            LABELS[i] for i in lr.predict(vec.transform([render(view(x), s.words, s.pairs) for x in xs]))], t0))
    return out


def main() -> None:
    sweep.one_extra_main(__doc__, "verdict_inputs", "# TF-IDF verdict: without questions, softer class weights", rows)


if __name__ == "__main__":
    sys.exit(main())
