"""Predictions JSON and the leaderboard CSV: round trips, official files, bad entries."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from sanctuary_local.errors import UserError
from sanctuary_local.io.claims import read_claims
from sanctuary_local.io.leaderboard import leaderboard_csv_text, read_leaderboard_csv
from sanctuary_local.io.predictions import (
    NO_ANSWER,
    gold_to_solution,
    leaderboard_to_predictions,
    prediction_to_official,
    predictions_to_leaderboard,
    read_predictions_json,
    write_predictions_json,
)
from sanctuary_local.records import LABELS, EvidenceItem, Prediction


def _pred(i: int = 0) -> Prediction:
    return Prediction(
        claim_index=i, claim_id=str(i), claim="The sky is green, says \"X\".", label=LABELS[1],
        evidence=(
            EvidenceItem("What colour is the sky?", "The sky is blue.", "http://a", "", 2, 10, 26, 0.75),
            EvidenceItem("Who is X?", "A blogger.", "http://b"),
        ),
        justification="Sources say blue.", provisional_label=LABELS[2], flags=("short_evidence",), timings={"hyde": 0.5},
    )


def test_json_round_trip_with_extras(tmp_path: Path) -> None:
    preds = [_pred(0), _pred(1)]
    path = write_predictions_json(preds, tmp_path / "out" / "preds.json")
    assert read_predictions_json(path) == preds
    official = orjson.loads(path.read_bytes())[0]
    assert {"claim_id", "claim", "evidence", "pred_label"} <= set(official)
    assert set(official["evidence"][0]) >= {"question", "answer", "url", "scraped_text"}
    assert official == prediction_to_official(preds[0])
    assert list(tmp_path.joinpath("out").iterdir()) == [path], "no temp file is left behind"


def test_official_format_without_extras(tmp_path: Path) -> None:
    data = [{"claim_id": 12, "claim": "c", "pred_label": LABELS[3], "evidence": [{"question": "q", "answer": "a", "url": "u"}]}]
    (tmp_path / "p.json").write_bytes(orjson.dumps(data))
    (p,) = read_predictions_json(tmp_path / "p.json")
    assert (p.claim_index, p.claim_id, p.label) == (12, "12", LABELS[3])
    assert p.evidence == (EvidenceItem("q", "a", "u"),)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"claim": "x"}, "expected a JSON array"),
        ([{"claim": "x", "pred_label": "Supported"}, {"claim": "y"}], "entry 1: missing or non-string required field 'pred_label'"),
        ([{"claim": "x", "pred_label": "True"}], "entry 0: unknown pred_label 'True'"),
        ([{"claim": "x", "pred_label": "Supported", "evidence": [{"question": "q"}]}], "entry 0, evidence 0: missing"),
        ([{"claim": "x", "pred_label": "Supported", "evidence": "q"}], "'evidence' must be a list"),
        ([3], "entry 0: expected a JSON object"),
    ],
)
def test_bad_predictions(tmp_path: Path, data: object, message: str) -> None:
    path = tmp_path / "p.json"
    path.write_bytes(orjson.dumps(data))
    with pytest.raises(UserError) as err:
        read_predictions_json(path)
    assert message in str(err.value) and str(path) in str(err.value)


def test_leaderboard_rows_from_predictions() -> None:
    (row,) = predictions_to_leaderboard([_pred(4)])
    assert (row.id, row.label, row.split) == ("4", LABELS[1], "pred")
    assert row.evi == "What colour is the sky?\t\t\nThe sky is blue.\t\t\n\nWho is X?\t\t\nA blogger.\t\t\n\n"
    (back,) = leaderboard_to_predictions([row])
    assert predictions_to_leaderboard([back]) == [row]


def test_examples_solution_has_no_answer_marker(examples_dir: Path) -> None:
    rows = gold_to_solution(read_claims(examples_dir / "claims.json"))
    assert [r.split for r in rows] == ["gold"] * 4
    assert rows[3].qa_pairs[-1] == ("Who made the claim?", NO_ANSWER)
    assert rows[0].qa_pairs[0][1].startswith("Yes. Like most metals")  # Boolean + explanation
    assert len(rows[0].qa_pairs) == 4  # one pair per gold answer


def test_gold_to_solution_matches_official_csv(shared_dir: Path, dev_claims_path: Path) -> None:
    expected = (shared_dir / "data" / "fever8_baseline" / "solution_dev_part_a.csv").read_bytes()
    assert leaderboard_csv_text(gold_to_solution(read_claims(dev_claims_path))).encode("utf-8") == expected


@pytest.mark.parametrize("name", ["submission_part_a.csv", "solution_dev_part_a.csv"])
def test_baseline_csv_json_csv_is_identical(shared_dir: Path, tmp_path: Path, name: str) -> None:
    src = shared_dir / "data" / "fever8_baseline" / name
    preds = leaderboard_to_predictions(read_leaderboard_csv(src))
    again = read_predictions_json(write_predictions_json(preds, tmp_path / "p.json"))
    assert again == preds
    assert leaderboard_csv_text(predictions_to_leaderboard(again)).encode("utf-8") == src.read_bytes()


def test_test_claims_have_no_solution(tmp_path: Path) -> None:
    (tmp_path / "c.json").write_bytes(orjson.dumps([{"claim": "x"}]))
    with pytest.raises(UserError, match="no gold label"):
        gold_to_solution(read_claims(tmp_path / "c.json"))
