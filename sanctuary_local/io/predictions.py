"""Predictions in the official AVeriTeC JSON format, and conversions to/from the
FEVER-8 leaderboard CSV.

Official prediction object (paper §3 output (v, E, J)): ``claim_id`` (an integer when
it is all digits, as in the official files), ``claim``, ``evidence: [{question, answer,
url, scraped_text}]``, ``pred_label``. We add our own fields (``justification``,
``provisional_label``, ``flags``, ``timings``, ``claim_index``, ``meta``,
``evidence_all``; evidence ``doc_position``/``start``/``end``/``score``), which official
tools ignore; ``read_predictions_json`` accepts files with or without them.

Identifiers: the leaderboard CSV ``id`` is the claim's index in the input claims file.
For a whole-file run that is what the official converter writes (the prediction's
position); for a subset run (``--claims-range 50:100``) it keeps the dataset ids, so the
rows score against the matching rows of the solution CSV.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from sanctuary_local.errors import UserError
from sanctuary_local.io.claims import load_json_file
from sanctuary_local.io.leaderboard import LeaderboardRow, atomic_write_bytes, format_evi
from sanctuary_local.records import LABELS, Claim, EvidenceItem, Prediction

__all__ = [
    "prediction_to_official",
    "write_predictions_json",
    "read_predictions_json",
    "predictions_to_leaderboard",
    "gold_to_solution",
    "leaderboard_to_predictions",
    "NO_ANSWER",
    "MAX_EVIDENCE",
    "collapse_whitespace",
]

#: What the official converter writes for a gold question without any answer.
NO_ANSWER = "No answer could be found."
#: Question-answer pairs a run emits per claim in ``evidence`` and ``submission.csv``:
#: the official Hungarian-METEOR scorer reads only the first 10 (``max_questions``) and
#: the Ev2R judge truncates; the full ranked list stays in ``evidence_all``.
MAX_EVIDENCE = 10
_EVIDENCE_EXTRAS = ("doc_position", "start", "end", "score")


def collapse_whitespace(text: str) -> str:
    """Every whitespace run → one space, stripped: emitted questions and answers never
    contain the tabs and newlines that separate pairs in the leaderboard CSV."""
    return " ".join(text.split())


def official_claim_id(claim_id: str) -> int | str:
    """The ``claim_id`` as the official JSON writes it: an integer when it is one
    (written back identically), else the string."""
    return int(claim_id) if claim_id.isascii() and claim_id.isdigit() and str(int(claim_id)) == claim_id else claim_id


def _evidence_to_official(items: Sequence[EvidenceItem]) -> list[dict[str, Any]]:
    out = []
    for e in items:
        item: dict[str, Any] = {"question": e.question, "answer": e.answer, "url": e.url, "scraped_text": e.scraped_text}
        item |= {k: getattr(e, k) for k in _EVIDENCE_EXTRAS}
        out.append(item)
    return out


def prediction_to_official(p: Prediction) -> dict[str, Any]:
    """``Prediction`` → the official prediction object plus our extra fields
    (``evidence_all`` only when the prediction has it)."""
    out: dict[str, Any] = {
        "claim_id": official_claim_id(p.claim_id),
        "claim": p.claim,
        "evidence": _evidence_to_official(p.evidence),
        "pred_label": p.label,
        "justification": p.justification,
        "provisional_label": p.provisional_label,
        "flags": list(p.flags),
        "timings": dict(p.timings),
        "claim_index": p.claim_index,
    }
    if p.evidence_all:
        out["evidence_all"] = _evidence_to_official(p.evidence_all)
    if p.meta:
        out["meta"] = dict(p.meta)
    return out


def write_predictions_json(preds: Sequence[Prediction], path: str | Path) -> Path:
    """Write predictions as an official JSON array, atomically (temp file + rename)."""
    data = orjson.dumps([prediction_to_official(p) for p in preds], option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
    return atomic_write_bytes(Path(path), data + b"\n")


def read_predictions_json(path: str | Path) -> list[Prediction]:
    """Read a predictions file (ours or any official-format one); a bad entry is a
    ``UserError`` naming the file and the entry index."""
    path = Path(path)
    data = load_json_file(path, "predictions file")
    if not isinstance(data, list):
        raise UserError(f"{path}: expected a JSON array of predictions at the top level, got {type(data).__name__}")
    return [_parse_prediction(entry, i, f"{path}: entry {i}") for i, entry in enumerate(data)]


def _parse_prediction(entry: Any, position: int, where: str) -> Prediction:
    if not isinstance(entry, dict):
        raise UserError(f"{where}: expected a JSON object, got {type(entry).__name__}")
    for key in ("claim", "pred_label"):
        if not isinstance(entry.get(key), str):
            raise UserError(f"{where}: missing or non-string required field '{key}'")
    label = entry["pred_label"]
    if label not in LABELS:
        raise UserError(f"{where}: unknown pred_label {label!r}; valid labels: {', '.join(LABELS)}")
    claim_id = str(entry.get("claim_id", position))
    claim_index = entry.get("claim_index")
    if not isinstance(claim_index, int):
        # Official files have only claim_id, which is the claim's index in the dataset.
        claim_index = int(claim_id) if claim_id.isdigit() else position
    evidence = entry.get("evidence") or []
    evidence_all = entry.get("evidence_all") or []
    for key, value in (("evidence", evidence), ("evidence_all", evidence_all)):
        if not isinstance(value, list):
            raise UserError(f"{where}: field '{key}' must be a list")
    return Prediction(
        claim_index=claim_index,
        claim_id=claim_id,
        claim=entry["claim"],
        label=label,
        evidence=tuple(_parse_evidence(e, f"{where}, evidence {j}") for j, e in enumerate(evidence)),
        justification=str(entry.get("justification") or ""),
        provisional_label=entry.get("provisional_label"),
        flags=tuple(entry.get("flags") or ()),
        timings=dict(entry.get("timings") or {}),
        meta=dict(entry.get("meta") or {}),
        evidence_all=tuple(_parse_evidence(e, f"{where}, evidence_all {j}") for j, e in enumerate(evidence_all)),
    )


def _parse_evidence(e: Any, where: str) -> EvidenceItem:
    if not isinstance(e, dict):
        raise UserError(f"{where}: expected a JSON object, got {type(e).__name__}")
    for key in ("question", "answer"):
        if not isinstance(e.get(key), str):
            raise UserError(f"{where}: missing or non-string required field '{key}'")
    extras: dict[str, Any] = {}
    for key in _EVIDENCE_EXTRAS:
        if e.get(key) is not None:
            if not isinstance(e[key], (int, float)):
                raise UserError(f"{where}: field '{key}' must be a number")
            extras[key] = float(e[key]) if key == "score" else int(e[key])
    return EvidenceItem(
        question=e["question"],
        answer=e["answer"],
        url=str(e.get("url") or ""),
        scraped_text=str(e.get("scraped_text") or ""),
        **extras,
    )


def predictions_to_leaderboard(preds: Sequence[Prediction]) -> list[LeaderboardRow]:
    """Predictions → leaderboard rows (what the shared task's converter writes).

    ``id`` is the claim's index in the claims file (see the module docstring); the
    evidence is written as it is (a run's predictions already hold ≤ ``MAX_EVIDENCE``
    pairs; someone else's file is converted unchanged). ``split`` is ``"pred"`` unless
    the prediction came from a CSV with another split (kept in ``meta["split"]`` so that
    CSV → JSON → CSV is byte-identical)."""
    return [
        LeaderboardRow(
            id=str(p.claim_index),
            claim=p.claim,
            evi=format_evi([(e.question, e.answer) for e in p.evidence]),
            label=p.label,
            split=str(p.meta.get("split", "pred")),
        )
        for p in preds
    ]


def gold_to_solution(claims: Sequence[Claim]) -> list[LeaderboardRow]:
    """Gold claims → the solution CSV rows (``split="gold"``), ``id`` = the claim's index
    in the claims file (the official converter's position; a subset keeps its ids).

    One QA pair per gold *answer* (a question with several answers repeats the
    question); Boolean answers get ``". " + boolean_explanation``; a question with no
    answer gets ``NO_ANSWER``. Checked byte-for-byte against the official
    ``solution_dev_part_a.csv``."""
    rows = []
    for c in claims:
        if c.gold_label is None:
            raise UserError(f"claim {c.index}: has no gold label; a solution CSV needs a train/dev claims file")
        pairs = []
        for q in c.gold_questions:
            answers = [a.scored_text() for a in q.answers] or [NO_ANSWER]
            pairs.extend((q.question, a) for a in answers)
        rows.append(LeaderboardRow(id=str(c.index), claim=c.text, evi=format_evi(pairs), label=c.gold_label, split="gold"))
    return rows


def leaderboard_to_predictions(rows: Sequence[LeaderboardRow]) -> list[Prediction]:
    """Leaderboard rows → predictions (to score others' submissions); url is empty,
    the CSV does not carry it. A row with an unknown label is a UserError."""
    preds = []
    for position, r in enumerate(rows):
        if r.label not in LABELS:
            raise UserError(f"data row {position + 1} (id {r.id}): unknown label {r.label!r}; valid labels: {', '.join(LABELS)}")
        preds.append(
            Prediction(
                claim_index=int(r.id) if r.id.isdigit() else position,
                claim_id=r.id,
                claim=r.claim,
                label=r.label,
                evidence=tuple(EvidenceItem(question=q, answer=a, url="") for q, a in r.qa_pairs),
                meta={} if r.split == "pred" else {"split": r.split},
            )
        )
    return preds
