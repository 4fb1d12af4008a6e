"""Label metrics with the official scorer's semantics (scikit-learn's, all labels listed).

Per class c: precision = TP/(TP+FP), recall = TP/(TP+FN), F1 = 2PR/(P+R), each 0 when its
denominator is 0 (sklearn ``zero_division=0``). Macro-F1 is the unweighted mean over the
listed labels, including classes absent from gold and predictions. A prediction outside the
listed labels (a missing prediction) is wrong for accuracy and a false negative of its gold
class. The confusion matrix has gold labels as rows and predicted labels as columns.
The 2-class view maps every label but Supported to "Not Supported" (ClaimCLAIRE-style).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sanctuary_local.records import LABELS, SUPPORTED

NOT_SUPPORTED = "Not Supported"
BINARY_LABELS: tuple[str, ...] = (SUPPORTED, NOT_SUPPORTED)


@dataclass(frozen=True, slots=True)
class ClassScores:
    """Precision, recall, F1 and gold support of one label."""

    precision: float
    recall: float
    f1: float
    support: int


@dataclass(frozen=True, slots=True)
class LabelMetrics:
    """Accuracy, macro-F1, per-class scores and the confusion matrix over ``labels``."""

    labels: tuple[str, ...]
    n: int
    accuracy: float
    macro_f1: float
    per_class: dict[str, ClassScores]
    confusion: tuple[tuple[int, ...], ...]  # rows: gold, columns: predicted (listed labels only)

    def to_dict(self) -> dict[str, object]:
        return {
            "labels": list(self.labels),
            "n": self.n,
            "accuracy": self.accuracy,
            "macro_f1": self.macro_f1,
            "per_class": {k: {"precision": v.precision, "recall": v.recall, "f1": v.f1, "support": v.support} for k, v in self.per_class.items()},
            "confusion": [list(row) for row in self.confusion],
        }


def _ratio(num: int, den: int) -> float:
    return num / den if den else 0.0


def label_metrics(gold: Sequence[str], pred: Sequence[str], labels: Sequence[str] = LABELS) -> LabelMetrics:
    """Metrics of ``pred`` against ``gold`` (same length, same order) over ``labels``."""
    if len(gold) != len(pred):
        raise ValueError(f"{len(gold)} gold labels vs {len(pred)} predicted labels")
    per_class: dict[str, ClassScores] = {}
    for c in labels:
        tp = sum(1 for g, p in zip(gold, pred) if g == c and p == c)
        fp = sum(1 for g, p in zip(gold, pred) if g != c and p == c)
        fn = sum(1 for g, p in zip(gold, pred) if g == c and p != c)
        precision, recall = _ratio(tp, tp + fp), _ratio(tp, tp + fn)
        f1 = _ratio(2 * tp, 2 * tp + fp + fn)  # = 2PR/(P+R), 0 when undefined
        per_class[c] = ClassScores(precision, recall, f1, tp + fn)
    index = {c: i for i, c in enumerate(labels)}
    confusion = [[0] * len(labels) for _ in labels]
    for g, p in zip(gold, pred):
        if g in index and p in index:
            confusion[index[g]][index[p]] += 1
    correct = sum(1 for g, p in zip(gold, pred) if g == p)
    return LabelMetrics(
        labels=tuple(labels),
        n=len(gold),
        accuracy=_ratio(correct, len(gold)),
        macro_f1=sum(s.f1 for s in per_class.values()) / len(labels) if labels else 0.0,
        per_class=per_class,
        confusion=tuple(tuple(row) for row in confusion),
    )


def to_binary(label: str) -> str:
    """Supported stays; every other label becomes Not Supported; a missing one ("") stays
    missing so that it is still counted wrong."""
    if not label:
        return label
    return SUPPORTED if label == SUPPORTED else NOT_SUPPORTED


def binary_label_metrics(gold: Sequence[str], pred: Sequence[str]) -> LabelMetrics:
    """The 2-class view: Supported vs the rest."""
    return label_metrics([to_binary(g) for g in gold], [to_binary(p) for p in pred], BINARY_LABELS)
