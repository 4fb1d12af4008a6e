"""Each question–answer pair read against its claim by TF-IDF, the pairs pooled per claim.

The claim-level TF-IDF (``tfidf``) reads all ten pairs as one bag of words, so it cannot tell
which answer says what. This model reads one pair at a time, as the AVeriTeC baseline's
BERT does (``MichSchli/AVeriTeC``, ``veracity_prediction``), at a bag-of-words' cost: a pair's
text is its question and answer (the answer cut as every model cuts it), plus two marked word
lists that tie it to its claim: the answer's words of more than three letters that the claim
has too (each again with the prefix ``xx``), and its plain refutation words (prefix ``nn``; a
prefix, since the vectoriser's tokens are runs of letters and digits). Each pair is
trained on its claim's gold label, a claim's pairs sharing its weight (its label's balanced
weight, split evenly), and a claim's probabilities are its pairs' pooled (``pair_encoder.pool``:
the renormalised geometric mean by default). A claim with no pairs is read as one empty pair.

Stored as ``tfidf`` stores (``tfidf.write_arrays``): JSON vocabulary and ``.npz`` arrays.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from sanctuary_local.records import LABELS
from sanctuary_local.verdict_model.base import Progress, TrainSettings, class_weights, softmax
from sanctuary_local.verdict_model.inputs import VerdictInput, answer_text
from sanctuary_local.verdict_model.pair_encoder import POOLS, pool, split_pairs
from sanctuary_local.verdict_model.tfidf import vectorizer, read_arrays, write_arrays

ARRAYS = "pair_tfidf_lr.npz"
MAX_ITER = 2000
_WORD = re.compile(r"[a-z0-9]+")
#: Refutation words marked again in a pair's answer (a second, separate feature for them).
CUE_WORDS = frozenset({"not", "no", "never", "false", "fake", "misleading"})
#: Words of at most this many letters are never marked as shared with the claim.
SHORT = 3
SHARED_MARK, CUE_MARK = "xx", "nn"


def pair_text(x: VerdictInput, answer_words: int = 100, focus: bool = False) -> str:
    """The text of ``x``'s one pair (``x`` from ``split_pairs``; a claim alone gives "")."""
    if not x.pairs:
        return ""
    p = x.pairs[0]
    answer = answer_text(p, x.claim, answer_words, focus)
    claim_words = set(_WORD.findall(x.claim.lower()))
    words = _WORD.findall(answer.lower())
    shared = " ".join(f"{SHARED_MARK}{w}" for w in words if w in claim_words and len(w) > SHORT)
    cues = " ".join(f"{CUE_MARK}{w}" for w in words if w in CUE_WORDS)
    return " ".join(f"Q: {' '.join(p.question.split())} A: {answer} {shared} {cues}".split())


def pair_counts(xs: Sequence[VerdictInput], max_pairs: int) -> np.ndarray:
    """Rows each claim gives (``split_pairs``: its pairs, or one for a claim alone)."""
    return np.array([max(1, len(x.pairs[:max_pairs])) for x in xs], dtype=int)


def _texts(xs: Sequence[VerdictInput], how) -> list[str]:  # noqa: ANN001 - a model or TrainSettings
    """Every pair's text, claims in order."""
    return [pair_text(one, how.answer_words, how.answer_focus) for x in xs for one in split_pairs(x, how.max_pairs)]


def fit(xs: Sequence[VerdictInput], s: TrainSettings, max_iter: int = MAX_ITER):  # noqa: ANN201 - sklearn types
    """The vectoriser, the regression, and its weighted training loss (cross-entropy + L2
    penalty, scikit-learn's scaling), fitted on ``xs``'s pairs. Below ``max_iter``'s
    convergence the solver stops early, which is how a test watches the loss fall."""
    from sklearn.linear_model import LogisticRegression

    texts = _texts(xs, s)
    owner = np.repeat(np.arange(len(xs)), pair_counts(xs, s.max_pairs))
    y = np.array([LABELS.index(xs[i].label) for i in owner])
    per_claim = class_weights([x.label for x in xs], s.class_weight)[[LABELS.index(x.label) for x in xs]]
    w = per_claim[owner] / pair_counts(xs, s.max_pairs)[owner]
    w = w * len(xs) / w.sum()
    vec = vectorizer()
    features = vec.fit_transform(texts)
    lr = LogisticRegression(C=s.c, max_iter=max_iter, random_state=s.seed)
    lr.fit(features, y, sample_weight=w)
    p = lr.predict_proba(features)
    loss = float(np.sum(w * -np.log(np.clip(p[np.arange(len(y)), y], 1e-300, None))) / w.sum()
                 + np.sum(np.square(lr.coef_, dtype=np.float64)) / (2 * s.c * w.sum()))
    return vec, lr, loss


def train_pair_tfidf(xs: Sequence[VerdictInput], s: TrainSettings, out: Path, progress: Progress | None = None) -> dict:
    """Fit on ``xs``, write the files into ``out``; returns what the card records of it."""
    if s.pair_pool not in POOLS:
        raise ValueError(f"pair_pool must be one of {', '.join(POOLS)}, got {s.pair_pool!r}")
    vec, lr, loss = fit(xs, s)
    if progress is not None:
        progress(1, 1, loss)
    if list(lr.classes_) != list(range(len(LABELS))):
        raise ValueError(f"the training claims lack labels: only {[LABELS[i] for i in lr.classes_]} occur")
    write_arrays(out, vec, lr, ARRAYS)
    return {"features": len(vec.vocabulary_), "iterations": int(np.max(lr.n_iter_)), "loss": round(loss, 6),
            "pairs": int(pair_counts(xs, s.max_pairs).sum())}


class PairTfidfModel:
    """A per-pair TF-IDF verdict model read from its directory."""

    kind = "pair-tfidf"

    def __init__(self, directory: Path, sha256: str, answer_words: int, answer_focus: bool = False,
                 max_pairs: int = 10, pair_pool: str = "logmean") -> None:
        if pair_pool not in POOLS:
            raise ValueError(f"its card's pair_pool {pair_pool!r} is not one of {', '.join(POOLS)}")
        self.directory, self.sha256, self.answer_words, self.answer_focus = directory, sha256, answer_words, answer_focus
        self.max_pairs, self.pair_pool = max_pairs, pair_pool
        self._vec, self._coef, self._intercept = read_arrays(directory, ARRAYS)

    def predict_proba(self, xs: Sequence[VerdictInput]) -> np.ndarray:
        return predict(self._vec, self._coef, self._intercept, xs, self)


def predict(vec, coef: np.ndarray, intercept: np.ndarray, xs: Sequence[VerdictInput], how) -> np.ndarray:  # noqa: ANN001
    """The claims' pooled probabilities from a vectoriser and the regression's arrays; ``how``
    gives ``answer_words``, ``answer_focus``, ``max_pairs`` and ``pair_pool`` (a model, or the
    ``TrainSettings`` of a model fitted in memory)."""
    if not xs:
        return np.zeros((0, len(LABELS)))
    probs = softmax(np.asarray(vec.transform(_texts(xs, how)) @ coef.T, dtype=np.float64) + intercept)
    bounds = np.concatenate([[0], np.cumsum(pair_counts(xs, how.max_pairs))])
    return np.array([pool(probs[a:b], how.pair_pool) for a, b in zip(bounds[:-1], bounds[1:])], dtype=np.float64)
