"""Stance cues per question–answer pair, pooled per claim, then logistic regression.

What a bag of words over the whole evidence misses is *which* answer says what: each pair is
read on its own for refutation, negation, support, hedging and conflict cues, whether it
repeats the claim's numbers, and how much of the claim and its question it shares; the pairs'
features are pooled per claim (mean, max, and a mean weighted by overlap with the claim) and
joined with the claim's own cues. A balanced logistic regression over the standardised
features gives the four labels. The AVeriTeC baseline reads stance pair by pair too
(``MichSchli/AVeriTeC``, ``veracity_prediction``); this is its cheap, regex-level cousin.

Stored without pickle: the scaler's mean and scale and the regression's coefficients as a
``.npz`` of plain arrays.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from sanctuary_local.records import LABELS
from sanctuary_local.verdict_model.base import Progress, TrainSettings, class_weights, softmax
from sanctuary_local.verdict_model.inputs import VerdictInput

ARRAYS = "stance_lr.npz"
MAX_ITER = 3000

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")
_STOP = frozenset("the a an of to in and or is was were be been are on for with that this by as at from it its has "
                  "have had not no yes did does do what who when where which how why there their they he she his "
                  "her said says".split())
#: Cue families, each a word list read as whole words in the lower-cased text.
CUES = {
    "refute": r"false|fake|hoax|misleading|debunk\w*|no evidence|not true|untrue|fabricat\w*|doctored|altered|"
              r"photoshop\w*|manipulated|satir\w*|myth|baseless|incorrect|inaccurate|wrong|rumou?rs?|conspiracy|scam|"
              r"misinformation|disinformation|unfounded|bogus|fact.?check\w*|viral|circulat\w*|no record|no such|"
              r"pants on fire|mislead\w*",
    "negation": r"not|never|no|none|nor|didn't|doesn't|isn't|wasn't|aren't|weren't|won't|cannot|can't|denied|denies|"
                r"deny|refused|rejected",
    "support": r"confirmed|confirms|true|indeed|correct|accurate|announced|officially|verified|approved|signed|passed|"
               r"launched|according to|data show\w*|statistics",
    "unknown": r"unclear|not clear|no information|could not|couldn't|unknown|unverified|not found|not available|"
               r"no data|unable",
    "conflict": r"however|but|although|though|partly|partially|half|mixed|context|exaggerat\w*|out of context|"
                r"cherry|while|some|despite|yet",
    "hearsay": r"claim\w*|alleg\w*|purport\w*|supposedly|post\w*|shared|facebook|twitter|whatsapp|tweet\w*",
}
_CUES = {k: re.compile(rf"\b(?:{v})\b") for k, v in CUES.items()}
#: Index of the claim-overlap feature in a pair's row (the pooling weight).
_OVERLAP = 2 * len(CUES) + 3


def _content(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if len(w) > 2 and w not in _STOP}


def _numbers(text: str) -> set[str]:
    return {n.replace(",", "") for n in _NUMBER.findall(text)}


def pair_features(question: str, answer: str, claim_words: set[str], claim_numbers: set[str]) -> list[float]:
    """One pair's row: per cue family its count (at most 5) and rate per 10 words; whether the
    answer has numbers, the share of the claim's numbers it repeats, and whether it has numbers
    yet none of the claim's; its overlap with the claim's and the question's content words;
    log of its length, whether it is under 3 words, and the annotators' unanswerable marker."""
    low = answer.lower()
    words = _content(answer)
    n = max(1, len(low.split()))
    row: list[float] = []
    for rx in _CUES.values():
        m = len(rx.findall(low))
        row += [min(m, 5), m / n * 10]
    nums = _numbers(answer)
    shared = len(claim_numbers & nums)
    row += [float(bool(nums)), shared / max(1, len(claim_numbers)), float(bool(claim_numbers and nums) and not shared)]
    asked = _content(question)
    row += [len(claim_words & words) / max(1, len(claim_words)), len(asked & words) / max(1, len(asked))]
    row += [math.log1p(n), float(n < 3), float("no answer could be found" in low)]
    return row


N_PAIR = len(pair_features("", "", set(), set()))


def claim_features(x: VerdictInput, max_pairs: int = 10) -> np.ndarray:
    """The claim's row: its pairs' features pooled (mean, max, overlap-weighted mean), then the
    claim's own cue counts, whether it has numbers, log of its length and its number of pairs."""
    cw, cn = _content(x.claim), _numbers(x.claim)
    pairs = x.pairs[:max_pairs]
    rows = np.array([pair_features(p.question, p.answer, cw, cn) for p in pairs] or [[0.0] * N_PAIR], dtype=float)
    w = rows[:, _OVERLAP] + 0.05
    w = w / w.sum()
    low = x.claim.lower()
    own = [len(rx.findall(low)) for rx in _CUES.values()] + [float(bool(cn)), math.log1p(len(low.split())), len(pairs)]
    return np.concatenate([rows.mean(0), rows.max(0), (rows * w[:, None]).sum(0), own])


def features(xs: Sequence[VerdictInput], max_pairs: int = 10) -> np.ndarray:
    return np.array([claim_features(x, max_pairs) for x in xs], dtype=float)


def fit(xs: Sequence[VerdictInput], s: TrainSettings, max_iter: int = MAX_ITER):  # noqa: ANN201 - sklearn types
    """The standardiser and balanced logistic regression (in memory), fitted on ``xs``."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    y = np.array([LABELS.index(x.label) for x in xs])
    f = features(xs, s.max_pairs)
    scaler = StandardScaler().fit(f)
    weights = class_weights([x.label for x in xs], s.class_weight)
    lr = LogisticRegression(C=s.c, max_iter=max_iter, random_state=s.seed,
                            class_weight={i: float(w) for i, w in enumerate(weights)})
    lr.fit(scaler.transform(f), y)
    return scaler, lr


def train_stance(xs: Sequence[VerdictInput], s: TrainSettings, out: Path, progress: Progress | None = None) -> dict:
    """Fit on ``xs``, write the arrays into ``out``; returns what the card records of it."""
    scaler, lr = fit(xs, s)
    if progress is not None:
        progress(1, 1, None)
    if list(lr.classes_) != list(range(len(LABELS))):
        raise ValueError(f"the training claims lack labels: only {[LABELS[i] for i in lr.classes_]} occur")
    scale = np.where(scaler.scale_ > 0, scaler.scale_, 1.0)
    np.savez(out / ARRAYS, mean=scaler.mean_.astype(np.float64), scale=scale.astype(np.float64),
             coef=lr.coef_.astype(np.float64), intercept=lr.intercept_.astype(np.float64))
    return {"features": int(lr.coef_.shape[1]), "iterations": int(np.max(lr.n_iter_))}


class StanceModel:
    """A stance-cue verdict model read from its directory."""

    kind = "stance"

    def __init__(self, directory: Path, sha256: str, answer_words: int, answer_focus: bool = False,
                 max_pairs: int = 10) -> None:
        self.directory, self.sha256, self.answer_words, self.answer_focus = directory, sha256, answer_words, answer_focus
        self.max_pairs = max_pairs
        with np.load(directory / ARRAYS, allow_pickle=False) as a:
            self._mean, self._scale, self._coef, self._intercept = a["mean"], a["scale"], a["coef"], a["intercept"]
        width = 3 * N_PAIR + len(CUES) + 3
        if self._coef.shape != (len(LABELS), width) or self._mean.shape != (width,) or self._scale.shape != (width,):
            raise ValueError(f"{directory}: the stance arrays do not match the {width} features this code computes")

    def predict_proba(self, xs: Sequence[VerdictInput]) -> np.ndarray:
        if not xs:
            return np.zeros((0, len(LABELS)))
        z = (features(xs, self.max_pairs) - self._mean) / self._scale
        return softmax(z @ self._coef.T + self._intercept)
