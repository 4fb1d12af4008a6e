"""Score aligned predictions: label metrics + Hungarian METEOR (+ Ev2R when a judge is given).

Figures and their definitions (AVeriTeC, Schlichtkrull et al. 2023; FEVER-8 leaderboard):
- ``q_only`` / ``qa``: mean Hungarian-METEOR utility over claims (see ``meteor``);
- ``averitec[t]``: fraction of claims whose Q+A utility is > t and whose label is right;
  t = 0.25 is the "old AVeriTeC score"; 0.1–0.5 are what the 2024 scorer also prints;
- ``by_claim_type``: the score at 0.25 restricted to claims of each type (a claim with
  several types counts for each); only available when GOLD is a claims JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sanctuary_local.evaluation.inputs import Aligned
from sanctuary_local.evaluation.labels import LabelMetrics, binary_label_metrics, label_metrics
from sanctuary_local.evaluation.meteor import averitec_hits, batch_utilities

#: Reporting thresholds of the 2024 scorer; the headline one is 0.25.
THRESHOLDS: tuple[float, ...] = (0.1, 0.2, 0.25, 0.3, 0.4, 0.5)
HEADLINE_THRESHOLD = 0.25


@dataclass
class ClaimScore:
    """Per-claim figures (one row of ``per_claim.csv``)."""

    claim_id: str
    gold_label: str
    pred_label: str
    n_pred_evidence: int
    n_gold_evidence: int
    q_only: float
    qa: float
    claim_types: tuple[str, ...] = ()
    ev2r: dict[str, float] = field(default_factory=dict)

    @property
    def correct(self) -> bool:
        return self.gold_label == self.pred_label


@dataclass
class EvalReport:
    """Everything ``eval`` reports; ``to_dict`` is ``metrics.json``."""

    labels: LabelMetrics
    binary: LabelMetrics
    claims: list[ClaimScore]
    q_only: float
    qa: float
    averitec: dict[float, float]
    by_claim_type: dict[str, dict[str, float]]
    missing: list[str]
    extra: list[str]
    notes: list[str]
    ev2r: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "n_claims": len(self.claims),
            "labels": self.labels.to_dict(),
            "labels_2class": self.binary.to_dict(),
            "meteor": {
                "q_only": self.q_only,
                "qa": self.qa,
                "averitec_score": self.averitec[HEADLINE_THRESHOLD],
                "averitec_score_at": {f"{t:g}": v for t, v in self.averitec.items()},
                "by_claim_type_at_0.25": self.by_claim_type,
                "definition": "Hungarian METEOR (nltk single_meteor_score, WordNet 3.0), ≤10 predicted items, "
                "score = label correct and Q+A utility > threshold",
            },
            "ev2r": self.ev2r,
            "missing_predictions": {"count": len(self.missing), "ids": self.missing, "treated_as": "no evidence, wrong label"},
            "extra_predictions": {"count": len(self.extra), "ids": self.extra, "treated_as": "ignored"},
            "notes": self.notes,
        }


def _by_claim_type(claims: list[ClaimScore], hits: list[float]) -> dict[str, dict[str, float]]:
    groups: dict[str, list[float]] = {}
    for c, h in zip(claims, hits):
        for t in c.claim_types:
            groups.setdefault(t, []).append(h)
    return {t: {"n": len(v), "averitec_score": float(np.mean(v))} for t, v in sorted(groups.items())}


def evaluate(data: Aligned, workers: int | None = None) -> EvalReport:
    """Label metrics and Hungarian-METEOR scores of ``data`` (Ev2R is added by ``ev2r``)."""
    utilities = batch_utilities([p.qa_pairs for p in data.pred], [g.qa_pairs for g in data.gold], workers=workers)
    claims = [
        ClaimScore(g.claim_id, g.label, p.label, len(p.qa_pairs), len(g.qa_pairs), q, qa, g.claim_types)
        for g, p, (q, qa) in zip(data.gold, data.pred, utilities)
    ]
    averitec = {t: float(np.mean([averitec_hits(c.qa, c.correct, t) for c in claims])) for t in THRESHOLDS}
    headline_hits = [averitec_hits(c.qa, c.correct, HEADLINE_THRESHOLD) for c in claims]
    gold_labels, pred_labels = [c.gold_label for c in claims], [c.pred_label for c in claims]
    return EvalReport(
        labels=label_metrics(gold_labels, pred_labels),
        binary=binary_label_metrics(gold_labels, pred_labels),
        claims=claims,
        q_only=float(np.mean([c.q_only for c in claims])),
        qa=float(np.mean([c.qa for c in claims])),
        averitec=averitec,
        by_claim_type=_by_claim_type(claims, headline_hits),
        missing=list(data.missing),
        extra=list(data.extra),
        notes=list(data.notes),
    )
