"""The floor: word and bigram TF-IDF of claim + evidence, then logistic regression.

Stored without pickle (a model file must never run code on load): the vocabulary as JSON,
the IDF weights and the regression's coefficients as a ``.npz`` of plain arrays. At
inference the probabilities are the multinomial softmax of ``X · coefᵀ + intercept``,
exactly what scikit-learn's ``predict_proba`` computes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from sanctuary_local.records import LABELS
from sanctuary_local.verdict_model.base import Progress, TrainSettings, class_weights, softmax
from sanctuary_local.verdict_model.inputs import VerdictInput, render

VOCABULARY = "vocabulary.json"
ARRAYS = "tfidf_lr.npz"
#: The vectoriser's settings: saved nowhere else, so a change here is a new model kind.
_VECTORIZER = {"ngram_range": (1, 2), "min_df": 2, "sublinear_tf": True, "lowercase": True,
               "strip_accents": "unicode", "max_features": 200_000}
#: The solver's iteration cap: the shipped models converge well before it (46 for verdict-tfidf-web).
MAX_ITER = 2000


def vectorizer(vocabulary: dict[str, int] | None = None):  # noqa: ANN202 - sklearn type
    """The word and bigram TF-IDF vectoriser every TF-IDF model uses (``_VECTORIZER``)."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    return TfidfVectorizer(vocabulary=vocabulary, dtype=np.float32, **_VECTORIZER)


def _fit(xs: Sequence[VerdictInput], s: TrainSettings, max_pairs: int, max_iter: int):  # noqa: ANN202 - sklearn types
    """``fit``'s vectoriser and regression, with the training features and labels it built."""
    from sklearn.linear_model import LogisticRegression

    y = np.array([LABELS.index(x.label) for x in xs])
    vec = vectorizer()
    features = vec.fit_transform([render(x, s.answer_words, max_pairs, s.answer_focus) for x in xs])
    weights = class_weights([x.label for x in xs], s.class_weight)
    lr = LogisticRegression(C=s.c, max_iter=max_iter, random_state=s.seed,
                            class_weight={i: float(w) for i, w in enumerate(weights)})
    lr.fit(features, y)
    return vec, lr, features, y


def fit(xs: Sequence[VerdictInput], s: TrainSettings, max_pairs: int | None = None,  # noqa: ANN201 - sklearn types
        max_iter: int = MAX_ITER):
    """The fitted vectoriser and logistic regression (in memory): what ``train_tfidf`` writes,
    and what ``benchmarks/verdict/tfidf_sweep.py`` scores without writing. Each answer is cut to
    ``s.answer_words`` words (its focused part with ``s.answer_focus``), and at most ``max_pairs``
    pairs are read (default ``s.max_pairs``; stage 3 gives 10). ``max_iter`` caps the solver's iterations: below
    convergence it stops early (scikit-learn warns), which is how a test watches the loss fall."""
    vec, lr, _, _ = _fit(xs, s, s.max_pairs if max_pairs is None else max_pairs, max_iter)
    return vec, lr


def _objective(lr, features, y: np.ndarray, s: TrainSettings, labels: Sequence[str]) -> tuple[float, float]:  # noqa: ANN001
    w = class_weights(list(labels), s.class_weight)[y]
    p = lr.predict_proba(features)
    cross_entropy = float(np.sum(w * -np.log(np.clip(p[np.arange(len(y)), y], 1e-300, None))) / np.sum(w))
    penalty = float(np.sum(np.square(lr.coef_, dtype=np.float64)) / (2 * s.c * np.sum(w)))
    return cross_entropy, penalty


def training_loss(vec, lr, xs: Sequence[VerdictInput], s: TrainSettings,  # noqa: ANN001 - sklearn types
                  max_pairs: int | None = None) -> tuple[float, float]:
    """What the solver minimises, at the fitted regression, on its own training inputs: the
    cross-entropy averaged with each claim weighed by its label's ``s.class_weight``, and the
    L2 penalty ‖coef‖² / (2 · C · Σ weights) (scikit-learn's scaling; the intercept is not
    penalised). The solver starts from zero weights, i.e. (ln 4, 0)."""
    y = np.array([LABELS.index(x.label) for x in xs])
    pairs = s.max_pairs if max_pairs is None else max_pairs
    features = vec.transform([render(x, s.answer_words, pairs, s.answer_focus) for x in xs])
    return _objective(lr, features, y, s, [x.label for x in xs])


def train_tfidf(xs: Sequence[VerdictInput], s: TrainSettings, out: Path, progress: Progress | None = None) -> dict:
    """Fit on ``xs`` (each with its label), write the model files into ``out``; returns
    what the model card records of the training."""
    vec, lr, features, y = _fit(xs, s, s.max_pairs, MAX_ITER)
    if progress is not None:
        progress(1, 1, None)
    if list(lr.classes_) != list(range(len(LABELS))):
        raise ValueError(f"the training claims lack labels: only {[LABELS[i] for i in lr.classes_]} occur")
    write_arrays(out, vec, lr, ARRAYS)
    return {"features": len(vec.vocabulary_), "iterations": int(np.max(lr.n_iter_)),
            "loss": round(sum(_objective(lr, features, y, s, [x.label for x in xs])), 6)}


def write_arrays(out: Path, vec, lr, arrays: str) -> None:  # noqa: ANN001 - sklearn types
    """The vectoriser's vocabulary (JSON) and its IDF weights with the regression's coefficients
    (``arrays``, a ``.npz`` of plain arrays) into ``out``: no pickle."""
    vocab = {t: int(i) for t, i in sorted(vec.vocabulary_.items(), key=lambda kv: kv[1])}
    (out / VOCABULARY).write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    np.savez(out / arrays, idf=vec.idf_.astype(np.float32), coef=lr.coef_.astype(np.float32),
             intercept=lr.intercept_.astype(np.float32))


def read_arrays(directory: Path, arrays: str):  # noqa: ANN201 - sklearn type
    """What ``write_arrays`` wrote: the vectoriser, the coefficients and the intercepts."""
    vocab = json.loads((directory / VOCABULARY).read_text(encoding="utf-8"))
    with np.load(directory / arrays, allow_pickle=False) as a:
        idf, coef, intercept = a["idf"], a["coef"], a["intercept"]
    if coef.shape != (len(LABELS), len(vocab)) or idf.shape != (len(vocab),):
        raise ValueError(f"{directory}: the TF-IDF arrays do not match its vocabulary of {len(vocab)} terms")
    vec = vectorizer(vocab)
    vec.idf_ = idf
    return vec, coef, intercept


class TfidfModel:
    """A TF-IDF + logistic-regression verdict model read from its directory."""

    kind = "tfidf"

    def __init__(self, directory: Path, sha256: str, answer_words: int, answer_focus: bool = False,
                 max_pairs: int = 10) -> None:
        self.directory, self.sha256, self.answer_words, self.answer_focus = directory, sha256, answer_words, answer_focus
        self.max_pairs = max_pairs
        self._vec, self._coef, self._intercept = read_arrays(directory, ARRAYS)

    def predict_proba(self, xs: Sequence[VerdictInput]) -> np.ndarray:
        if not xs:
            return np.zeros((0, len(LABELS)))
        features = self._vec.transform([render(x, self.answer_words, self.max_pairs, self.answer_focus) for x in xs])
        return softmax(np.asarray(features @ self._coef.T) + self._intercept)
