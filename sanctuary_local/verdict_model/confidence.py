"""Saying when unsure: a threshold on the chosen label's probability, fitted on held-in claims.

A claim whose label has probability at least the threshold is *confident*; any other is
shown as uncertain, with its two most likely labels. The threshold is fitted on the fit range
(dev claims 100-149, by the project's rules) as the lowest one at which the claims answered
are at least ``target`` right (default 0.80), among thresholds that answer at least
``MIN_ANSWERED`` claims; it is written beside the model (``confidence_rule.json``) by
``verdict-model fit-confidence``. ``risk_coverage`` gives the accuracy against the share of
claims answered, for the figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sanctuary_local.records import LABELS

#: The least number of fit claims a threshold must answer (fewer is too few to trust).
MIN_ANSWERED = 5
DEFAULT_TARGET = 0.80


@dataclass(frozen=True, slots=True)
class Sureness:
    """How sure the verdict is of one claim."""

    label: str
    probability: float
    runner_up: str
    runner_up_probability: float
    confident: bool | None
    """None: the model has no fitted threshold."""


def chosen_probability(probs: np.ndarray, labels: Sequence[str]) -> np.ndarray:
    """The probability of each row's chosen label."""
    return np.array([float(p[LABELS.index(lab)]) for p, lab in zip(probs, labels, strict=True)])


def sureness(p: Sequence[float], label: str, threshold: float | None) -> Sureness:
    """The claim's label and runner-up with their probabilities, and whether it is confident."""
    order = sorted(range(len(LABELS)), key=lambda i: (-float(p[i]), i))
    runner = next(i for i in order if LABELS[i] != label)
    q = float(p[LABELS.index(label)])
    return Sureness(label, q, LABELS[runner], float(p[runner]), None if threshold is None else q >= threshold)


def fit_threshold(probs: np.ndarray, labels: Sequence[str], gold: Sequence[str],
                  target: float = DEFAULT_TARGET) -> dict[str, float | int | None]:
    """The lowest threshold on the chosen label's probability at which the claims answered are
    at least ``target`` right (answering at least ``MIN_ANSWERED``), with the fit's accuracy and
    coverage; ``threshold`` is None (never confident) when no threshold reaches it."""
    q = chosen_probability(probs, labels)
    right = np.array([a == b for a, b in zip(labels, gold, strict=True)])
    best: dict[str, float | int | None] = {"threshold": None, "fit_answered": 0, "fit_accuracy": None,
                                           "fit_coverage": 0.0}
    for t in sorted(set(q.tolist())):
        answered = q >= t
        n = int(answered.sum())
        if n < MIN_ANSWERED:
            break
        acc = float(right[answered].mean())
        if acc >= target:
            best = {"threshold": round(float(t), 6), "fit_answered": n, "fit_accuracy": round(acc, 4),
                    "fit_coverage": round(n / len(q), 4)}
            break
    return best


def risk_coverage(probs: np.ndarray, labels: Sequence[str], gold: Sequence[str]) -> list[tuple[float, float]]:
    """(share of claims answered, accuracy on them), answering the surest first."""
    q = chosen_probability(probs, labels)
    right = np.array([a == b for a, b in zip(labels, gold, strict=True)], dtype=float)
    order = np.argsort(-q, kind="stable")
    hits = np.cumsum(right[order])
    n = np.arange(1, len(q) + 1)
    return [(float(k / len(q)), float(h / k)) for k, h in zip(n, hits)]


def answered(probs: np.ndarray, labels: Sequence[str], gold: Sequence[str], threshold: float | None) -> dict[str, float]:
    """Coverage and accuracy of the confident claims at ``threshold`` (none when it is None)."""
    q = chosen_probability(probs, labels)
    sure = q >= threshold if threshold is not None else np.zeros(len(q), dtype=bool)
    right = np.array([a == b for a, b in zip(labels, gold, strict=True)])
    n = int(sure.sum())
    return {"answered": n, "coverage": round(n / max(1, len(q)), 4),
            "accuracy": round(float(right[sure].mean()), 4) if n else None}


def from_meta(meta: object) -> Sureness | None:
    """The sureness a trained verdict recorded (``meta["label_scores"]``) of its likeliest
    label, None for a label read from an LLM's text or a record without probabilities."""
    ls = meta.get("label_scores") if isinstance(meta, dict) else None
    if not isinstance(ls, dict):
        return None
    probs, labels = ls.get("probabilities") or [], ls.get("labels") or list(LABELS)
    if len(probs) != len(LABELS) or list(labels) != list(LABELS):
        return None
    p = [float(v) for v in probs]
    s = sureness(p, LABELS[max(range(len(LABELS)), key=lambda i: (p[i], -i))], None)
    confident = ls.get("confident")
    return Sureness(s.label, s.probability, s.runner_up, s.runner_up_probability,
                    confident if isinstance(confident, bool) else None)


def uncertain_note(label: str, meta: object) -> str:
    """``uncertain: Refuted 0.44 or Supported 0.31`` for a claim its model is not sure of
    (below the fitted confidence threshold); "" for a confident claim or one without a rule."""
    s = from_meta(meta)
    if s is None or s.confident is not False:
        return ""
    s = sureness([float(v) for v in meta["label_scores"]["probabilities"]], label, None)  # type: ignore[index]
    return f"uncertain: {s.label} {s.probability:.2f} or {s.runner_up} {s.runner_up_probability:.2f}"
