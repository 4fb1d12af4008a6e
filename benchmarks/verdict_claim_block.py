"""A claim-only TF-IDF block beside the default's row: does the claim's own prior help?

The default (``packaged:verdict-tfidf-hyde``) reads one TF-IDF row of the claim and its evidence
together. Each candidate row stacks a second TF-IDF row, of the claim text alone (the same
vectoriser settings, fitted on the training claims), beside it at weight ``w``, and refits the
logistic regression with the default's settings (C, seed, balanced class weights, 10 pairs, 48
words) on the default's training inputs: gold evidence plus every ``--extra`` (the default: the
retrieved evidence of 483 train claims, searched with the gold question alone and with the claim
as its hypothetical answer). The default's row is refitted the same way and must reproduce its
committed figures. Scored on the tuning folds as ``verdict_models.py`` scores them (pipeline dev
0-49 and 100-149, retrieved dev 100-249, the selection figure). Labels are the argmax. Dev 50-99
is never read.

    python benchmarks/verdict_claim_block.py --pipeline-run runs/quality_e2e/cpu_trained_hyde_short_split_dev0-49/run \\
        --fit-run runs/quality_e2e/cpu_trained_hyde_short_dev100-149/run --retrieved-dev runs/vm/dev100-249_evidence.jsonl \\
        --extra ret483=runs/vm/train_evidence.jsonl --extra hyde483=runs/vm/train_evidence_hyde.jsonl \\
        --notes benchmarks/results/rule_claim_block.md
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

import verdict_tfidf_sweep as sweep

from sanctuary_local.records import LABELS  # noqa: E402
from sanctuary_local.verdict_model.base import TrainSettings, class_weights  # noqa: E402
from sanctuary_local.verdict_model.evidence import inputs_from_evidence  # noqa: E402
from sanctuary_local.verdict_model.inputs import render  # noqa: E402
from sanctuary_local.verdict_model.tfidf import _vectorizer, fit  # noqa: E402

WEIGHTS = (0.5, 1.0, 2.0)
#: The default's own training settings (its model card), read here so the refit is the default.
DEFAULT = sweep.read_card(sweep.resolve("packaged:verdict-tfidf-hyde"))["settings"]


def rows(sw: sweep.Sweep, extras: list[str]) -> list[dict[str, Any]]:
    """The majority, the default refitted, and the claim block at each weight."""
    import scipy.sparse
    from sklearn.linear_model import LogisticRegression

    s = sweep.settings(argparse.Namespace(c=[], pairs=[], words=[]), [extras[0]])[0]
    ts = TrainSettings(base="tfidf", c=DEFAULT["c"], answer_words=DEFAULT["answer_words"], seed=DEFAULT["seed"],
                       class_weight=DEFAULT["class_weight"])
    train = list(sw.gold)
    for name in extras:  # every --extra, in order, as verdict-model train --evidence reads them
        train += inputs_from_evidence(sw.claims, sw.extras[name], max_pairs=s.pairs)
    tests = sw.tests(s.pairs)
    out = [sw.majority()]
    vec, lr = fit(train, ts, s.pairs)
    out.append(sweep.scored("default D, refitted", tests, lambda xs: sweep._predict(vec, lr, xs, s)))
    claim_vec = _vectorizer()
    claim_vec.fit([x.claim for x in train])
    text = vec.transform([render(x, s.words, s.pairs) for x in train])
    claims = claim_vec.transform([x.claim for x in train])
    weights = class_weights([x.label for x in train], ts.class_weight)
    y = np.array([LABELS.index(x.label) for x in train])
    for w in WEIGHTS:
        block = LogisticRegression(C=ts.c, max_iter=2000, random_state=ts.seed,
                                   class_weight={i: float(v) for i, v in enumerate(weights)})
        block.fit(scipy.sparse.hstack([text, w * claims]).tocsr(), y)

        def predict(xs: list[Any], block: Any = block, w: float = w) -> list[str]:
            feats = scipy.sparse.hstack([vec.transform([render(x, s.words, s.pairs) for x in xs]),
                                         w * claim_vec.transform([x.claim for x in xs])]).tocsr()
            return [LABELS[i] for i in block.predict(feats)]

        out.append(sweep.scored(f"claim block, weight {w:g}", tests, predict))
    return out


def main() -> None:
    sweep.one_extra_main(__doc__, "verdict_claim_block", "# TF-IDF verdict with a claim-only block", rows)


if __name__ == "__main__":
    sys.exit(main())
