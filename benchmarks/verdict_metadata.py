"""Does the claim's metadata help the TF-IDF verdict? (reporting source, speaker)

In AVeriTeC train the reporting source is a strong prior: 77 % of the claims reported from
Facebook are *Refuted*, against 44 % of those with no source. A claims file in AVeriTeC format
carries ``reporting_source`` and ``speaker``; a claim typed into ``check`` carries neither. Each
row fits the shipped default's settings (``verdict_tfidf_sweep.py``'s default row: the same
training inputs, C, pairs and words) with the metadata added, and scores the same tuning folds:

- **tokens A / B / C**: words put in front of the claim text (``zsrcfacebook``; B adds whether a
  speaker is named, C the speaker's name), so they share the TF-IDF row with the evidence;
- **one-hot, weight w**: a separate block beside the TF-IDF row: the source among those seen
  at least 10 times in train, else "other" or "none", and whether a speaker is named.

Labels are the argmax. Dev 50-99 is never read.

    python benchmarks/verdict_metadata.py --pipeline-run runs/quality_e2e/cpu_trained_hyde_short_split_dev0-49/run \\
        --fit-run runs/quality_e2e/cpu_trained_dev100-149/run --retrieved-dev runs/vm/dev100-249_evidence.jsonl \\
        --extra ret483=runs/vm/train_evidence.jsonl
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
from dataclasses import replace
from typing import Any

import numpy as np

import verdict_tfidf_sweep as sweep

from sanctuary_local.records import LABELS  # noqa: E402
from sanctuary_local.verdict_model.base import TrainSettings, class_weights  # noqa: E402
from sanctuary_local.verdict_model.evidence import inputs_from_evidence  # noqa: E402
from sanctuary_local.verdict_model.inputs import VerdictInput, render  # noqa: E402
from sanctuary_local.verdict_model.tfidf import fit  # noqa: E402

MIN_SOURCE_CLAIMS = 10


def _norm(text: str | None) -> str:
    return re.sub(r"[^a-z0-9]", "", (text or "").lower())


class Metadata:
    """Each claim's (source, speaker), found by its text; the source vocabulary of train."""

    def __init__(self, sw: sweep.Sweep) -> None:
        self.by_text = {" ".join(c.text.split()): (_norm(c.reporting_source), _norm(c.speaker))
                        for c in [*sw.claims, *sw.dev]}
        counts = collections.Counter(_norm(c.reporting_source) for c in sw.claims)
        self.sources = sorted(k for k, v in counts.items() if k and v >= MIN_SOURCE_CLAIMS) + ["other", "none"]

    def of(self, x: VerdictInput) -> tuple[str, str]:
        return self.by_text[" ".join(x.claim.split())]

    def tokens(self, x: VerdictInput, variant: str) -> VerdictInput:
        src, spk = self.of(x)
        words = ["zsrc" + (src or "none")]
        if variant == "B":
            words.append("zspk" + ("named" if spk else "none"))
        elif variant == "C":
            words.append("zspk" + (spk or "none"))
        return replace(x, claim=" ".join(words) + " " + x.claim)

    def onehot(self, xs: list[VerdictInput]) -> Any:
        import scipy.sparse

        rows = np.zeros((len(xs), len(self.sources) + 1), dtype=np.float32)
        for i, x in enumerate(xs):
            src, spk = self.of(x)
            rows[i, self.sources.index(src if src in self.sources else ("other" if src else "none"))] = 1
            rows[i, -1] = float(bool(spk))
        return scipy.sparse.csr_matrix(rows)


def rows(sw: sweep.Sweep, extras: list[str]) -> list[dict[str, Any]]:
    """The default, the three token variants and the one-hot block at three weights."""
    extra_name = extras[0]
    import scipy.sparse
    from sklearn.linear_model import LogisticRegression

    md = Metadata(sw)
    s = sweep.settings(argparse.Namespace(c=[], pairs=[], words=[]), [extra_name])[0]
    ts = TrainSettings(base="tfidf", c=s.c, answer_words=s.words, seed=sweep.SHIPPED["seed"],
                       class_weight=sweep.SHIPPED["class_weight"])
    train = sw.gold + inputs_from_evidence(sw.claims, sw.extras[extra_name], max_pairs=s.pairs)
    tests = sw.tests(s.pairs)
    out = [sw.majority()]

    def score(name: str, predict: Any) -> None:
        out.append(sweep.scored(name, tests, predict))

    fitted = {}
    for variant in ("", "A", "B", "C"):
        f = (lambda x, v=variant: md.tokens(x, v)) if variant else (lambda x: x)
        vec, lr = fitted[variant] = fit([f(x) for x in train], ts, s.pairs)
        score(f"tokens {variant}" if variant else "default (no metadata)",
              lambda xs, vec=vec, lr=lr, f=f: sweep._predict(vec, lr, [f(x) for x in xs], s))
    vec = fitted[""][0]  # the default's vocabulary and IDF; the regression is refitted below
    text = vec.transform([render(x, s.words, s.pairs) for x in train])
    weights = class_weights([x.label for x in train], ts.class_weight)
    y = np.array([LABELS.index(x.label) for x in train])
    for w in (0.5, 1.0, 2.0):
        lr = LogisticRegression(C=ts.c, max_iter=2000, random_state=ts.seed,
                                class_weight={i: float(v) for i, v in enumerate(weights)})
        lr.fit(scipy.sparse.hstack([text, w * md.onehot(train)]).tocsr(), y)
        score(f"one-hot, weight {w:g}", lambda xs, lr=lr, w=w: [LABELS[i] for i in lr.predict(scipy.sparse.hstack(
            [vec.transform([render(x, s.words, s.pairs) for x in xs]), w * md.onehot(xs)]).tocsr())])
    return out


def main() -> None:
    sweep.one_extra_main(__doc__, "verdict_metadata", "# TF-IDF verdict with the claim's metadata", rows)


if __name__ == "__main__":
    sys.exit(main())
