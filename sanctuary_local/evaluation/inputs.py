"""Scorer inputs: predictions and gold in any supported form → aligned ``EvalExample`` lists.

PRED: our ``predictions.json`` (official format), a ``run`` output directory holding one, or
a leaderboard CSV. GOLD: an official claims file with labels, or a solution CSV. Both are
reduced to (id, claim, label, question-answer pairs) — exactly what the leaderboard scorer
sees — and aligned by claim id. The id is the claim's index in the claims file (the CSV
``id``; in our predictions JSON ``claim_index``, else ``claim_id``), so a subset run
(``run --claims-range 50:100``) lines up with gold claims 50–99 of the full file;
``select_range`` restricts both sides to such a range. A missing prediction becomes a
placeholder with no evidence and no label (counted wrong, utility 0), as the official
scorer does, and is reported; a prediction for an unknown id is ignored and reported.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sanctuary_local.errors import UserError
from sanctuary_local.records import CONFLICTING, LABELS, NEE, REFUTED, SUPPORTED

#: Label placeholder of a claim with no (usable) prediction: never equal to a gold label.
MISSING_LABEL = ""

_LABEL_VARIANTS: dict[str, str] = {
    "supported": SUPPORTED, "supports": SUPPORTED,
    "refuted": REFUTED, "refutes": REFUTED,
    "not enough evidence": NEE, "not enough info": NEE, "not enough information": NEE, "nei": NEE,
    "conflicting evidence/cherrypicking": CONFLICTING, "conflicting evidence/cherry-picking": CONFLICTING,
    "conflicting evidence / cherrypicking": CONFLICTING, "conflicting evidence": CONFLICTING,
    "conflicting": CONFLICTING, "cherrypicking": CONFLICTING, "cherry-picking": CONFLICTING,
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class EvalExample:
    """One claim as the scorer sees it (prediction or gold)."""

    claim_id: str
    claim: str
    label: str
    qa_pairs: tuple[tuple[str, str], ...]
    claim_types: tuple[str, ...] = ()


@dataclass
class Aligned:
    """Gold and predictions in gold order; ``pred[i]`` answers ``gold[i]``."""

    gold: list[EvalExample]
    pred: list[EvalExample]
    missing: list[str] = field(default_factory=list)  # gold ids without a prediction
    extra: list[str] = field(default_factory=list)  # predicted ids not in gold
    notes: list[str] = field(default_factory=list)  # per-claim warnings (normalised labels, no evidence …)


def normalize_label(raw: Any, where: str) -> str:
    """A canonical AVeriTeC label from a known variant; anything else is a UserError naming ``where``."""
    if isinstance(raw, str):
        if raw in LABELS:
            return raw
        key = re.sub(r"\s+", " ", raw.strip().lower())
        if key in _LABEL_VARIANTS:
            return _LABEL_VARIANTS[key]
    raise UserError(f"{where}: unknown label {raw!r}; valid labels: {', '.join(LABELS)}")


def _from_csv(path: Path, *, gold: bool) -> list[EvalExample]:
    from sanctuary_local.io.leaderboard import read_leaderboard_csv

    rows = list(enumerate(read_leaderboard_csv(path), start=1))  # (data row number, row)
    if gold and any(r.split == "gold" for _, r in rows):
        rows = [(n, r) for n, r in rows if r.split == "gold"]  # the leaderboard scores the gold split only
    out = []
    for number, r in rows:
        where = f"{path}: row {number} (claim id {r.id})"
        label = normalize_label(r.label, where) if (gold or r.label.strip()) else MISSING_LABEL
        out.append(EvalExample(r.id, r.claim, label, tuple(r.qa_pairs)))
    _check_unique_in_file(out, [f"row {n}" for n, _ in rows], path)
    return out


def _check_unique_in_file(examples: Sequence[EvalExample], positions: Sequence[str], path: Path) -> None:
    """Two entries of one file for the same claim id: a UserError naming both positions."""
    first: dict[str, str] = {}
    for e, where in zip(examples, positions):
        if (other := first.setdefault(e.claim_id, where)) != where:
            raise UserError(f"{path}: duplicate claim id {e.claim_id}: {other} and {where}")


def _gold_from_claims(path: Path) -> list[EvalExample]:
    from sanctuary_local.io.claims import read_claims
    from sanctuary_local.io.predictions import gold_to_solution

    claims = read_claims(path)
    try:
        rows = gold_to_solution(claims)  # UserError for a claim without a gold label or questions
    except UserError as exc:
        raise UserError(f"{path}: {exc}") from None
    return [
        EvalExample(r.id, r.claim, normalize_label(r.label, f"{path}: claim {c.index}"), tuple(r.qa_pairs), tuple(c.claim_types))
        for c, r in zip(claims, rows)
    ]


def _eval_label(entry: dict[str, Any], where: str) -> str:
    """``pred_label`` (else ``label``) normalised (``normalize_label``); none: ``MISSING_LABEL``."""
    raw = entry.get("pred_label", entry.get("label"))
    return MISSING_LABEL if raw is None or raw == "" else normalize_label(raw, where)


def _pred_from_json(path: Path) -> list[EvalExample]:
    """Checked as ``convert`` checks them (``io.predictions.parse_predictions``), but for the
    label: ``eval`` also reads variants and a missing label (counted wrong)."""
    from sanctuary_local.io.claims import load_json_file
    from sanctuary_local.io.predictions import parse_predictions

    data = load_json_file(path, "predictions file")
    preds = parse_predictions(data, path, _eval_label)
    out = []
    for entry, p in zip(data, preds):
        # The gold id is the claim's index: our claim_index, else an all-digit claim_id; an
        # official file's other ids ("claim-7") are matched as they are.
        by_index = entry.get("claim_index") is not None or (p.claim_id.isascii() and p.claim_id.isdigit())
        out.append(EvalExample(str(p.claim_index) if by_index else p.claim_id, p.claim, p.label,
                               tuple((e.question, e.answer) for e in p.evidence)))
    _check_unique_in_file(out, [f"entry {i}" for i in range(len(out))], path)
    return out


def load_predictions(path: str | Path) -> list[EvalExample]:
    """Read PRED: predictions JSON, a run directory containing ``predictions.json``, or a leaderboard CSV."""
    path = Path(path)
    if path.is_dir():
        if not os.path.lexists(path / "predictions.json"):  # anything else there: the reader names what it is
            raise UserError(f"{path}: is a directory without predictions.json; pass a run output directory or a predictions file")
        path = path / "predictions.json"
    if not path.exists():
        raise UserError(f"{path}: predictions file not found")
    return _from_csv(path, gold=False) if path.suffix.lower() == ".csv" else _pred_from_json(path)


def load_gold(path: str | Path) -> list[EvalExample]:
    """Read GOLD: an official claims file with labels (JSON) or a solution CSV."""
    path = Path(path)
    if path.is_dir() or not path.exists():
        raise UserError(f"{path}: gold file not found (expected a claims JSON with labels or a solution CSV)")
    gold = _from_csv(path, gold=True) if path.suffix.lower() == ".csv" else _gold_from_claims(path)
    if not gold:
        raise UserError(f"{path}: holds no gold claims; nothing to score against")
    for g in gold:
        if not g.qa_pairs:
            raise UserError(f"{path}: claim id {g.claim_id} has no gold evidence; METEOR/Ev2R need at least one question")
    return gold


def select_range(examples: Sequence[EvalExample], claims_range: str) -> list[EvalExample]:
    """The examples whose id is a claim index in ``claims_range`` (``a:b``, as ``run
    --claims-range``): scores a subset run against the full gold file."""
    from sanctuary_local.io.claims import parse_claims_range

    selected = parse_claims_range(claims_range)
    return [e for e in examples if e.claim_id.isascii() and e.claim_id.isdigit() and int(e.claim_id) in selected]


def _check_unique(examples: Sequence[EvalExample], what: str) -> dict[str, EvalExample]:
    by_id: dict[str, EvalExample] = {}
    for e in examples:
        if e.claim_id in by_id:
            raise UserError(f"{what}: claim id {e.claim_id} appears more than once")
        by_id[e.claim_id] = e
    return by_id


def align(gold: Sequence[EvalExample], pred: Sequence[EvalExample]) -> Aligned:
    """Pair every gold claim with its prediction by claim id (placeholders for missing ones)."""
    gold_by_id = _check_unique(gold, "gold")
    pred_by_id = _check_unique(pred, "predictions")
    if pred and not (gold_by_id.keys() & pred_by_id.keys()):
        raise UserError(
            f"no prediction id matches a gold id ({len(pred)} predictions, {len(gold)} gold claims; "
            f"first ids: predictions {list(pred_by_id)[:3]}, gold {list(gold_by_id)[:3]}); wrong gold file?"
        )
    out = Aligned(gold=list(gold), pred=[])
    for g in gold:
        p = pred_by_id.get(g.claim_id)
        if p is None:
            out.missing.append(g.claim_id)
            p = EvalExample(g.claim_id, g.claim, MISSING_LABEL, ())
        elif p.label == MISSING_LABEL:
            out.notes.append(f"claim {g.claim_id}: prediction has no label (counted wrong)")
        if p.claim_id not in out.missing and not p.qa_pairs:
            out.notes.append(f"claim {g.claim_id}: prediction has no evidence (utility 0)")
        elif any(not q.strip() for q, _ in p.qa_pairs):
            out.notes.append(f"claim {g.claim_id}: prediction has an empty question")
        out.pred.append(p)
    out.extra = [i for i in pred_by_id if i not in gold_by_id]
    return out
