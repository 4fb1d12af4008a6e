"""Predictions in the official AVeriTeC JSON format, and conversions to/from the
FEVER-8 leaderboard CSV.

Official prediction object (paper §3 output (v, E, J)): ``claim_id`` (an integer when
it is all digits, as in the official files), ``claim``, ``evidence: [{question, answer,
url, scraped_text}]``, ``pred_label``. We add our own fields (``justification``,
``provisional_label``, ``flags``, ``timings``, ``claim_index``, ``meta``,
``evidence_all``, and for a trained verdict ``label_probabilities``, ``confident`` and
``runner_up``; evidence ``doc_position``/``start``/``end``/``score``), which official
tools ignore; ``read_predictions_json`` accepts files with or without them.

Identifiers: the leaderboard CSV ``id`` is the claim's index in the input claims file.
For a whole-file run that is what the official converter writes (the prediction's
position); for a subset run (``--claims-range 50:100``) it keeps the dataset ids, so the
rows score against the matching rows of the solution CSV.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

from sanctuary_local.errors import UserError
from sanctuary_local.io.claims import MAX_INDEX_DIGITS, check_claim_id, index_from_id, load_json_file
from sanctuary_local.io.leaderboard import LeaderboardRow, atomic_write_bytes, format_evi, scorer_evi_problems, scorer_pairs
from sanctuary_local.records import LABELS, Claim, EvidenceItem, Prediction

__all__ = [
    "prediction_to_official",
    "write_predictions_json",
    "read_predictions_json",
    "parse_predictions",
    "official_label",
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


def one_line(text: str) -> str:
    """``text`` as it is when it holds no whitespace but spaces, else whitespace-collapsed."""
    return collapse_whitespace(text) if any(ch.isspace() and ch != " " for ch in text) else text


def official_evi(pairs: Sequence[tuple[str, str]]) -> str:
    """The ``evi`` cell of someone else's question-answer pairs, read by the scorer as
    exactly these pairs: written as they are when it would (the official converter's
    bytes: the official CSVs round-trip), else with every question and answer holding
    tabs or newlines collapsed to one line. A ``\\t\\t\\n`` inside a text, or an answer
    starting with a newline, would otherwise split one pair into two (or crash the scorer)."""
    pairs = list(pairs)
    evi = format_evi(pairs)
    if scorer_pairs(evi) == pairs:
        return evi
    return format_evi([(one_line(q), one_line(a)) for q, a in pairs])


def official_evi_or_placeholder(claim: str, pairs: Sequence[tuple[str, str]]) -> str:
    """``official_evi``, but never a blank cell: the scorer reads an empty ``evi`` as NaN
    and crashes on it. A prediction without a usable pair gets the run's placeholder
    (``evidence_placeholder:no_answer``): the claim with ``NO_ANSWER``."""
    evi = official_evi(pairs)
    return evi if evi.strip() else official_evi([(one_line(claim).strip() or NO_ANSWER, NO_ANSWER)])


def official_claim_id(claim_id: str) -> int | str:
    """The ``claim_id`` as the official JSON writes it: an integer when it is one
    (written back identically, within int64), else the string."""
    digits = claim_id.isascii() and claim_id.isdigit() and len(claim_id) <= MAX_INDEX_DIGITS
    return int(claim_id) if digits and str(int(claim_id)) == claim_id else claim_id


def _evidence_to_official(items: Sequence[EvidenceItem]) -> list[dict[str, Any]]:
    out = []
    for e in items:
        item: dict[str, Any] = {"question": e.question, "answer": e.answer, "url": e.url, "scraped_text": e.scraped_text}
        item |= {k: getattr(e, k) for k in _EVIDENCE_EXTRAS}
        out.append(item)
    return out


def _sureness_fields(meta: dict[str, Any]) -> dict[str, Any]:
    """A trained verdict's label probabilities (``label_probabilities``: label → probability)
    and, when its model has a fitted confidence rule, ``confident`` and ``runner_up``, from
    ``meta["label_scores"]``; official tools ignore these extra fields."""
    ls = meta.get("label_scores") if isinstance(meta, dict) else None
    if not isinstance(ls, dict) or not isinstance(ls.get("probabilities"), list):
        return {}
    labels = ls.get("labels") or list(LABELS)
    out: dict[str, Any] = {"label_probabilities": dict(zip(labels, ls["probabilities"], strict=False))}
    if ls.get("confident") is not None:
        out |= {"confident": bool(ls["confident"]), "runner_up": ls.get("runner_up")}
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
    out |= _sureness_fields(p.meta)
    if p.evidence_all:
        out["evidence_all"] = _evidence_to_official(p.evidence_all)
    if p.meta:
        out["meta"] = dict(p.meta)
    return out


def write_predictions_json(preds: Sequence[Prediction], path: str | Path) -> Path:
    """Write predictions as an official JSON array, atomically (temp file + rename)."""
    data = orjson.dumps([prediction_to_official(p) for p in preds], option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
    return atomic_write_bytes(Path(path), data + b"\n")


#: Reads an entry's label: ``(entry, where) -> label`` (a ``UserError`` naming ``where``).
LabelReader = Callable[[dict[str, Any], str], str]


def official_label(entry: dict[str, Any], where: str) -> str:
    """``pred_label``, required and one of ``LABELS`` exactly."""
    if not isinstance(entry.get("pred_label"), str):
        raise UserError(f"{where}: missing or non-string required field 'pred_label'")
    if (label := entry["pred_label"]) not in LABELS:
        raise UserError(f"{where}: unknown pred_label {label!r}; valid labels: {', '.join(LABELS)}")
    return str(label)


def read_predictions_json(path: str | Path, label: LabelReader = official_label) -> list[Prediction]:
    """Read a predictions file (ours or any official-format one); a bad entry (a wrong type,
    an id in non-ASCII digits, a ``claim_index`` naming another claim than its ``claim_id``,
    a claim predicted twice) is a ``UserError`` naming the file and the entry index.
    ``label`` reads each entry's label (``eval`` also reads variants such as ``NEI``)."""
    return parse_predictions(load_json_file(Path(path), "predictions file"), Path(path), label)


def parse_predictions(data: Any, path: Path, label: LabelReader = official_label) -> list[Prediction]:
    """``read_predictions_json`` of JSON already loaded from ``path``."""
    if not isinstance(data, list):
        raise UserError(f"{path}: expected a JSON array of predictions at the top level, got {type(data).__name__}")
    preds = [_parse_prediction(entry, i, f"{path}: entry {i}", label) for i, entry in enumerate(data)]
    first: dict[int, int] = {}
    for i, p in enumerate(preds):
        if (other := first.setdefault(p.claim_index, i)) != i:
            raise UserError(f"{path}: entry {other} and entry {i} both predict claim {p.claim_index} (duplicate claim index)")
    return preds


def _typed(entry: dict[str, Any], key: str, where: str, ok: Callable[[Any], bool], want: str, default: Any) -> Any:
    """``entry[key]`` when ``ok(value)``, ``default`` when absent or null, else a UserError."""
    value = entry.get(key)
    if value is None:
        return default
    if not ok(value):
        raise UserError(f"{where}: field '{key}' must be {want}, got {type(value).__name__} {_short(value)}")
    return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "…"


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _claim_index(entry: dict[str, Any], claim_id: str, position: int, where: str) -> int:
    """Our ``claim_index`` when present (a non-negative integer): the claim's position in
    the claims file the run read, whatever its ``claim_id`` (a claims file may carry its
    dataset's ids, ``500`` for its first claim: a run writes ``claim_index`` 0 and
    ``claim_id`` 500). Official files have only ``claim_id``, which is the claim's index in
    the dataset; else the position."""
    index = _typed(entry, "claim_index", where, lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
                   "a non-negative integer", None)
    if index is None:
        from_id = index_from_id(claim_id, where)
        return position if from_id is None else from_id
    return index


def _parse_prediction(entry: Any, position: int, where: str, read_label: LabelReader) -> Prediction:
    if not isinstance(entry, dict):
        raise UserError(f"{where}: expected a JSON object, got {type(entry).__name__}")
    if not isinstance(entry.get("claim"), str):
        raise UserError(f"{where}: missing or non-string required field 'claim'")
    label = read_label(entry, where)
    raw_id = _typed(entry, "claim_id", where, lambda v: isinstance(v, (str, int)) and not isinstance(v, bool),
                    "a string or an integer", position)
    claim_id = check_claim_id(str(raw_id), where)
    evidence, evidence_all = (_typed(entry, key, where, lambda v: isinstance(v, list), "a list", [])
                              for key in ("evidence", "evidence_all"))  # 0, false or "" is not "none"
    flags = _typed(entry, "flags", where, lambda v: isinstance(v, list) and all(isinstance(f, str) for f in v),
                   "a list of strings", [])
    timings = _typed(entry, "timings", where, lambda v: isinstance(v, dict) and all(_number(t) for t in v.values()),
                     "an object of numbers", {})
    return Prediction(
        claim_index=_claim_index(entry, claim_id, position, where),
        claim_id=claim_id,
        claim=entry["claim"],
        label=label,
        evidence=tuple(_parse_evidence(e, f"{where}, evidence {j}") for j, e in enumerate(evidence)),
        justification=_typed(entry, "justification", where, lambda v: isinstance(v, str), "a string", ""),
        provisional_label=_typed(entry, "provisional_label", where, lambda v: isinstance(v, str), "a string or null", None),
        flags=tuple(flags),
        timings=dict(timings),
        meta=dict(_typed(entry, "meta", where, lambda v: isinstance(v, dict), "an object", {})),
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
    pairs; someone else's file keeps all its pairs), collapsed to one line where the
    scorer would misread them (``official_evi``); no pair at all gets the run's placeholder
    (``official_evi_or_placeholder``). ``split`` is ``"pred"`` unless
    the prediction came from a CSV with another split (kept in ``meta["split"]`` so that
    CSV → JSON → CSV is byte-identical)."""
    return [
        LeaderboardRow(
            id=str(p.claim_index),
            claim=p.claim,
            evi=official_evi_or_placeholder(p.claim, [(e.question, e.answer) for e in p.evidence]),
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
        if not c.gold_questions:
            raise UserError(f"claim {c.index}: has no gold questions; the official scorer crashes on a solution row "
                            "without evidence")
        pairs = []
        for q in c.gold_questions:
            answers = [a.scored_text() for a in q.answers] or [NO_ANSWER]
            pairs.extend((q.question, a) for a in answers)
        rows.append(LeaderboardRow(id=str(c.index), claim=c.text, evi=format_evi(pairs), label=c.gold_label, split="gold"))
    return rows


def leaderboard_to_predictions(rows: Sequence[LeaderboardRow]) -> list[Prediction]:
    """Leaderboard rows → predictions (to score others' submissions); url is empty,
    the CSV does not carry it. A row with an unknown label, or a second row for one
    claim index (a predictions file no command would read back), is a UserError."""
    preds = []
    first: dict[int, int] = {}
    for position, r in enumerate(rows):
        where = f"data row {position + 1} (id {r.id})"
        if r.label not in LABELS:
            raise UserError(f"{where}: unknown label {r.label!r}; valid labels: {', '.join(LABELS)}")
        index = index_from_id(r.id, where, "id")
        if problems := scorer_evi_problems(r.evi):  # the official converter would write it back unreadable
            raise UserError(f"{where}: the official scorer cannot read this row: {problems[0]}")
        if (other := first.setdefault(position if index is None else index, position)) != position:
            raise UserError(f"{where}: same claim index as data row {other + 1} (duplicate id)")
        preds.append(
            Prediction(
                claim_index=position if index is None else index,
                claim_id=r.id,
                claim=r.claim,
                label=r.label,
                evidence=tuple(EvidenceItem(question=q, answer=a, url="") for q, a in r.qa_pairs),
                meta={} if r.split == "pred" else {"split": r.split},
            )
        )
    return preds
