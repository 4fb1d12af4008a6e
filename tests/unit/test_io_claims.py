"""Claims files: official train/dev and test formats, round trips, every bad input."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from sanctuary_local.errors import UserError
from sanctuary_local.io.claims import claim_to_official, read_claims
from sanctuary_local.records import LABELS


def _write(tmp_path: Path, data: object, name: str = "claims.json") -> Path:
    p = tmp_path / name
    p.write_bytes(orjson.dumps(data))
    return p


def test_examples_have_one_claim_per_label(examples_dir: Path) -> None:
    claims = read_claims(examples_dir / "claims.json")
    assert [c.index for c in claims] == [0, 1, 2, 3]
    assert sorted(c.gold_label for c in claims) == sorted(LABELS)
    assert all(c.gold_questions and c.date and c.location for c in claims)


def test_dev_file_fields(dev_claims_path: Path) -> None:
    claims = read_claims(dev_claims_path)
    raw = json.loads(dev_claims_path.read_text(encoding="utf-8"))
    assert len(claims) == len(raw) == 250
    c, r = claims[1], raw[1]
    assert (c.text, c.gold_label, c.location, c.reporting_source) == (r["claim"], r["label"], r["location_ISO_code"], r["reporting_source"])
    assert c.date == r["claim_date"] and c.claim_id == "1"
    assert [q.question for q in c.gold_questions] == [q["question"] for q in r["questions"]]


@pytest.mark.parametrize("which", ["examples", "dev"])
def test_round_trip(which: str, examples_dir: Path, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    path = examples_dir / "claims.json" if which == "examples" else request.getfixturevalue("dev_claims_path")
    claims = read_claims(path)
    again = read_claims(_write(tmp_path, [claim_to_official(c) for c in claims]))
    assert again == claims


def test_test_format_without_labels(tmp_path: Path) -> None:
    data = [{"claim": "A said B.", "claim_date": "01-01-2024", "speaker": "A", "location_ISO_code": "DE"}, {"claim": "C.", "claim_id": "x9"}]
    claims = read_claims(_write(tmp_path, data))
    assert claims[0].gold_label is None and claims[0].gold_questions == () and claims[0].speaker == "A"
    assert claims[1].claim_id == "x9" and claims[1].index == 1
    official = [claim_to_official(c) for c in claims]
    assert "label" not in official[0] and "questions" not in official[0]
    assert read_claims(_write(tmp_path, official, "again.json")) == claims


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "is empty"),
        (b"  \n", "is empty"),
        (b'{"claim": "x"}', "expected a JSON array"),
        (b'[{"claim": "ok"},\n {"claim": "bad \xff"}]', "claims.json:2: not UTF-8"),
        (b'[{"claim": "ok"},\n {"claim": ]', "invalid JSON"),
        (b'[{"claim": "ok"}, {"speaker": "no claim"}]', "claim 1: missing or empty required field 'claim'"),
        (b'[{"claim": "ok"}, 5]', "claim 1: expected a JSON object"),
        (b'[{"claim": "ok", "label": "True"}]', "claim 0: unknown label 'True'"),
        (b'[{"claim": "ok", "questions": [{"answers": []}]}]', "claim 0, question 0"),
        (b'[{"claim": "ok", "questions": [{"question": "q", "answers": [{"x": 1}]}]}]', "question 0, answer 0"),
        # an answer's other fields are text too: a number there crashed `verdict-model train` later
        (b'[{"claim": "ok", "questions": [{"question": "q", "answers": [{"answer": "a", "boolean_explanation": 7}]}]}]',
         "claim 0, question 0, answer 0: field 'boolean_explanation' must be a string or null, got int"),
        (b'[{"claim": "ok", "questions": [{"question": "q", "answers": [{"answer": "a", "answer_type": ["x"]}]}]}]',
         "answer 0: field 'answer_type' must be a string or null, got list"),
        (b'[{"claim": "ok", "questions": [{"question": "q", "answers": [{"answer": "a", "source_url": {}}]}]}]',
         "answer 0: field 'source_url' must be a string or null, got dict"),
    ],
)
def test_bad_claims_files(tmp_path: Path, content: bytes, message: str) -> None:
    p = tmp_path / "claims.json"
    p.write_bytes(content)
    with pytest.raises(UserError) as err:
        read_claims(p)
    assert message in str(err.value)
    assert str(p) in str(err.value)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not found"):
        read_claims(tmp_path / "nope.json")
    with pytest.raises(UserError, match="is a directory"):
        read_claims(tmp_path)
