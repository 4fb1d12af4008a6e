"""From label probabilities to a label: argmax, or per-label offsets fitted on held-in claims.

A classifier trained on AVeriTeC, where 57 % of the claims are Refuted, rarely puts Not
Enough Evidence or Conflicting first. The rule adds an offset to each label's
log-probability (Refuted's stays 0) and takes the argmax; the offsets are chosen on the
fit range (dev claims 100-149) to maximise macro-F1 there, by coordinate ascent over a grid,
ties broken towards the smaller offset. It is written beside the model
(``decision_rule.json``) by ``verdict-model fit-rule``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sanctuary_local.evaluation.labels import label_metrics
from sanctuary_local.records import LABELS, REFUTED

GRID = tuple(np.round(np.arange(-2.0, 3.01, 0.25), 2))


def decide(probs: np.ndarray, offsets: Sequence[float] | None = None) -> list[str]:
    """The label of each row: argmax of log p + offsets (plain argmax without offsets)."""
    z = np.log(np.clip(probs, 1e-12, 1.0))
    if offsets is not None:
        z = z + np.asarray(offsets, dtype=float)
    return [LABELS[i] for i in np.argmax(z, axis=1)]


def _score(probs: np.ndarray, gold: Sequence[str], offsets: np.ndarray) -> tuple[float, float]:
    m = label_metrics(gold, decide(probs, offsets))
    return m.macro_f1, m.accuracy


def fit_offsets(probs: np.ndarray, gold: Sequence[str], rounds: int = 3) -> list[float]:
    """Offsets (``LABELS`` order, Refuted 0) that maximise macro-F1 (then accuracy) on ``gold``."""
    offsets = np.zeros(len(LABELS))
    best = _score(probs, gold, offsets)
    free = [i for i, lab in enumerate(LABELS) if lab != REFUTED]
    for _ in range(rounds):
        moved = False
        for i in free:
            for v in sorted(GRID, key=abs):
                trial = offsets.copy()
                trial[i] = v
                s = _score(probs, gold, trial)
                if s > best:
                    best, offsets, moved = s, trial, True
        if not moved:
            break
    return [float(x) for x in offsets]
