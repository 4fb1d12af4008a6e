"""AVeriTeC claims files (official JSON format) → ``Claim`` records and back.

The official files are one JSON array of objects. Train/dev entries carry the gold
``label``, ``justification`` and ``questions`` (each with ``answers``); test entries
carry only the claim and its metadata. The position of an entry in the array is the
claim index, which names the knowledge-store file ``{index}.json`` (paper §3: input
(c, m, e)).

Every user mistake (missing file, non-UTF-8 bytes, empty file, invalid JSON, wrong
top-level type, a missing ``claim`` field, an unknown label, a claim id written in
non-ASCII digits, two claims with the same id) is a ``UserError`` that names the file
and, where it applies, the claim index. A UTF-8 BOM is accepted.
"""

from __future__ import annotations

import re

from pathlib import Path
from typing import Any

import orjson

from sanctuary_local.errors import UserError
from sanctuary_local.io.files import read_utf8
from sanctuary_local.records import LABELS, Claim, GoldAnswer, GoldQuestion

__all__ = [
    "read_claims", "claim_to_official", "parse_claim", "load_json_file", "parse_claims_range", "check_claim_id",
    "index_from_id", "MAX_INDEX_DIGITS",
]

#: The most digits of an id read as a claim index (int64 range: orjson writes it as a number).
MAX_INDEX_DIGITS = 18


def check_claim_id(value: str, where: str, field: str = "claim_id") -> str:
    """``value``, unless it is written with non-ASCII digits ('٣', '３', '²'): ``int()`` reads
    those (or chokes on them) while every comparison of ids is by their text, so such an id
    would silently match nothing, or the wrong claim. A ``UserError`` naming ``where``."""
    if any(ch.isdigit() and not ch.isascii() for ch in value):
        shown = value if len(value) <= 40 else value[:40] + "…"
        ascii_form = f" (as ASCII: {int(value)})" if value.isdecimal() and len(value) <= MAX_INDEX_DIGITS else ""
        raise UserError(f"{where}: {field} {shown!r} is written with non-ASCII digits{ascii_form}; write ids with 0-9")
    return value


def index_from_id(value: str, where: str, field: str = "claim_id") -> int | None:
    """The claim index an all-digit (ASCII) id names; ``None`` for any other id. Non-ASCII
    digits and digit strings too long for an index are a ``UserError`` naming ``where``."""
    check_claim_id(value, where, field)
    if not (value.isascii() and value.isdigit()):
        return None
    if len(value) > MAX_INDEX_DIGITS:
        raise UserError(f"{where}: {field} is {len(value)} digits long, too long for a claim index")
    return int(value)


def parse_claims_range(spec: str) -> range:
    """``--claims-range a:b`` → the claim indices ``a ≤ i < b`` (either bound may be
    omitted). Indices are positions in the claims file, which is also what the
    leaderboard CSV ids are, so the same range selects the same claims everywhere.
    Bounds are non-negative ASCII integers with ``a < b``: a Python-style ``-5:`` (meant
    "the last five") would otherwise select every claim, and ``5`` every claim from 5 on."""
    match = re.fullmatch(r"\s*([0-9]*)\s*:\s*([0-9]*)\s*", spec)
    if match is None:
        raise UserError(f"--claims-range must look like a:b with 0 <= a < b, either bound optional (got '{spec}')")
    start, stop = int(match[1] or 0), int(match[2]) if match[2] else 2**63 - 1
    if stop <= start:
        raise UserError(f"--claims-range {spec} is empty: it selects claims a <= i < b, so b must be greater than a")
    return range(start, stop)


def load_json_file(path: str | Path, what: str = "JSON file") -> Any:
    """Read and parse a whole JSON file, turning every failure into a UserError
    (see ``files.read_utf8``); invalid JSON is reported with line and column."""
    path = Path(path)
    raw = read_utf8(path, what)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise UserError(f"{path}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None


def read_claims(path: str | Path) -> list[Claim]:
    """Read an official AVeriTeC claims file (train/dev with gold labels and questions,
    or test without); ``Claim.index`` is the entry's position in the file."""
    path = Path(path)
    data = load_json_file(path, "claims file")
    if not isinstance(data, list):
        raise UserError(f"{path}: expected a JSON array of claims at the top level, got {type(data).__name__}")
    claims = [parse_claim(entry, index, str(path)) for index, entry in enumerate(data)]
    first: dict[str, int] = {}
    for c in claims:  # an id left out is the claim's index: that too may clash with a given one
        if (other := first.setdefault(c.claim_id, c.index)) != c.index:
            raise UserError(f"{path}: duplicate claim_id {c.claim_id!r}: claim {other} and claim {c.index}")
    return claims


def _opt_str(entry: dict[str, Any], key: str, where: str) -> str | None:
    value = entry.get(key)
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return str(value)
    raise UserError(f"{where}: field '{key}' must be a string or null, got {type(value).__name__}")


def parse_claim(entry: Any, index: int, source: str = "<claims>") -> Claim:
    """One official claim object → ``Claim``; ``source`` names the file in errors."""
    where = f"{source}: claim {index}"
    if not isinstance(entry, dict):
        raise UserError(f"{where}: expected a JSON object, got {type(entry).__name__}")
    text = entry.get("claim")
    if not isinstance(text, str) or not text.strip():
        raise UserError(f"{where}: missing or empty required field 'claim'")
    label = _opt_str(entry, "label", where)
    if label is not None and label not in LABELS:
        raise UserError(f"{where}: unknown label {label!r}; valid labels: {', '.join(LABELS)}")
    types = entry.get("claim_types") or ()
    if not isinstance(types, (list, tuple)) or not all(isinstance(t, str) for t in types):
        raise UserError(f"{where}: field 'claim_types' must be a list of strings")
    claim_id = entry.get("claim_id")
    if claim_id is not None and (isinstance(claim_id, bool) or not isinstance(claim_id, (str, int, float))):
        raise UserError(f"{where}: field 'claim_id' must be a string or a number, got {type(claim_id).__name__}")
    claim_id = check_claim_id("" if claim_id is None else str(claim_id), where)
    return Claim(
        index=index,
        text=text,
        date=_opt_str(entry, "claim_date", where),
        speaker=_opt_str(entry, "speaker", where),
        reporting_source=_opt_str(entry, "reporting_source", where),
        location=_opt_str(entry, "location_ISO_code", where),
        original_url=_opt_str(entry, "original_claim_url", where),
        claim_types=tuple(types),
        gold_label=label,
        gold_justification=_opt_str(entry, "justification", where),
        gold_questions=_parse_questions(entry.get("questions"), where),
        claim_id=claim_id,
    )


def _parse_questions(raw: Any, where: str) -> tuple[GoldQuestion, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise UserError(f"{where}: field 'questions' must be a list, got {type(raw).__name__}")
    questions: list[GoldQuestion] = []
    for qi, q in enumerate(raw):
        qwhere = f"{where}, question {qi}"
        if not isinstance(q, dict) or not isinstance(q.get("question"), str):
            raise UserError(f"{qwhere}: expected an object with a string 'question'")
        answers = q.get("answers") or []
        if not isinstance(answers, list):
            raise UserError(f"{qwhere}: field 'answers' must be a list")
        questions.append(GoldQuestion(q["question"], tuple(_parse_answer(a, f"{qwhere}, answer {ai}") for ai, a in enumerate(answers))))
    return tuple(questions)


def _parse_answer(a: Any, where: str) -> GoldAnswer:
    if not isinstance(a, dict) or not isinstance(a.get("answer"), str):
        raise UserError(f"{where}: expected an object with a string 'answer'")
    fields = {}
    for key in ("answer_type", "source_url", "boolean_explanation"):
        value = a.get(key)
        if value is not None and not isinstance(value, str):  # read later as text (e.g. by verdict-model train)
            raise UserError(f"{where}: field '{key}' must be a string or null, got {type(value).__name__}")
        fields[key] = value or ""
    return GoldAnswer(answer=a["answer"], **fields)


def claim_to_official(claim: Claim) -> dict[str, Any]:
    """``Claim`` → the official claim object (keys in the official order).

    Fields the records do not keep (``fact_checking_article``, ``source_medium`` …) are
    not restored; every field ``read_claims`` reads round-trips exactly. Test-format
    claims (no gold label) get no ``label``/``justification``/``questions`` keys."""
    out: dict[str, Any] = {"claim": claim.text}
    if claim.claim_id != str(claim.index):
        out["claim_id"] = claim.claim_id
    if claim.gold_label is not None:
        out["label"] = claim.gold_label
    if claim.gold_justification is not None:
        out["justification"] = claim.gold_justification
    out |= {
        "claim_date": claim.date,
        "speaker": claim.speaker,
        "original_claim_url": claim.original_url,
        "reporting_source": claim.reporting_source,
        "location_ISO_code": claim.location,
        "claim_types": list(claim.claim_types),
    }
    if claim.gold_questions or claim.gold_label is not None:
        out["questions"] = [
            {"question": q.question, "answers": [_answer_to_official(a) for a in q.answers]} for q in claim.gold_questions
        ]
    return out


def _answer_to_official(a: GoldAnswer) -> dict[str, str]:
    d = {"answer": a.answer, "answer_type": a.answer_type, "source_url": a.source_url}
    if a.boolean_explanation:
        d["boolean_explanation"] = a.boolean_explanation
    return d
