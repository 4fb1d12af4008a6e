"""``verdict-model eval``: a model on claims' evidence, beside the majority class.

No LLM and no retrieval: the evidence is each claim's gold question–answer pairs, or the
pairs another system retrieved (``--evidence``: a leaderboard CSV or a predictions.json,
``verdict_model.external``), whose own labels are then scored beside the model's. The figure
is the classifier's alone (the pipeline's evidence end to end is judged by
``benchmarks/quality_e2e.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from sanctuary_local.evaluation.labels import label_metrics
from sanctuary_local.records import REFUTED, Claim
from sanctuary_local.verdict_model.base import VerdictModel
from sanctuary_local.verdict_model.decision import decide
from sanctuary_local.verdict_model.inputs import VerdictInput, from_gold

#: The majority class of AVeriTeC train (1,742 of 3,068 claims), the row every table shows.
MAJORITY = REFUTED


def labelled(claims: Sequence[Claim], where: str) -> list[VerdictInput]:
    """Gold-evidence inputs of claims that all carry a label (else a one-line error)."""
    from sanctuary_local.errors import UserError

    missing = [c.index for c in claims if not c.gold_label]
    if missing:
        shown = ", ".join(str(i) for i in missing[:5]) + (" …" if len(missing) > 5 else "")
        raise UserError(f"{where}: {len(missing)} claim(s) have no 'label' (claim {shown}); "
                        "training and evaluation need labelled claims")
    return [from_gold(c) for c in claims]


def metrics_of(gold: Sequence[str], pred: Sequence[str]) -> dict[str, Any]:
    m = label_metrics(gold, pred).to_dict()
    return {"accuracy": round(float(m["accuracy"]), 4), "macro_f1": round(float(m["macro_f1"]), 4),
            "per_class": m["per_class"], "confusion": m["confusion"], "n": m["n"]}


def evaluate(model: VerdictModel, xs: Sequence[VerdictInput], offsets: Sequence[float] | None = None,
             others: dict[str, Sequence[str]] | None = None) -> dict[str, Any]:
    """Metrics of the model (argmax, or the decision rule's ``offsets``), of the majority class,
    and of each of ``others`` (a name → the labels another system gave the same claims, e.g. the
    evidence file's own labels)."""
    gold = [x.label or "" for x in xs]
    probs = model.predict_proba(xs) if xs else np.zeros((0, 4))
    out = {"model": metrics_of(gold, decide(probs, offsets)),
           "majority": metrics_of(gold, [MAJORITY] * len(gold)), "majority_label": MAJORITY}
    if others:
        out["others"] = {name: metrics_of(gold, list(labels)) for name, labels in others.items()}
    if offsets is not None:
        out["argmax"] = metrics_of(gold, decide(probs))
        out["offsets"] = list(offsets)
    return out
