"""Files the project writes from someone else's predictions are scored, not crashed on.

A predictions JSON whose entry has no evidence (``"evidence": []``) or only blank pairs,
and a gold claim without questions, used to give an empty ``evi`` cell in ``convert``'s
CSV, ``convert --gold``'s and ``eval``'s official pair: pandas reads it as NaN and the
official FEVER-8 scorer stops on ``.split``. Audit finding; these tests fail on the code before.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sanctuary_local.cli import main
from sanctuary_local.io.leaderboard import check_official_rows, read_leaderboard_csv
from sanctuary_local.io.predictions import NO_ANSWER

LABEL = "Refuted"


def _pred(i: int, evidence: list[dict[str, str]]) -> dict[str, object]:
    return {"claim_id": i, "claim": f"Claim {i}, with a comma.", "evidence": evidence, "pred_label": LABEL}


def _gold(i: int, questions: list[dict[str, object]] | None = None) -> dict[str, object]:
    if questions is None:
        questions = [{"question": f"Q{i}?", "answers": [{"answer": f"A{i}.", "answer_type": "Abstractive"}]}]
    return {"claim": f"Claim {i}, with a comma.", "label": LABEL, "questions": questions}


def _write(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _preds(tmp_path: Path, first: int = 0) -> Path:
    qa = [{"question": "Q?", "answer": "A."}]
    blank = [{"question": "", "answer": ""}]
    return _write(tmp_path / "pred.json", [_pred(first, []), _pred(first + 1, blank), _pred(first + 2, qa)])


def test_convert_writes_a_placeholder_pair_for_a_prediction_without_evidence(tmp_path: Path) -> None:
    out = tmp_path / "sub.csv"
    assert main(["convert", str(_preds(tmp_path)), "--to", str(out)]) == 0
    assert check_official_rows(out) == []
    rows = read_leaderboard_csv(out)
    assert rows[0].qa_pairs == [("Claim 0, with a comma.", NO_ANSWER)]
    assert rows[2].qa_pairs == [("Q?", "A.")]


def test_convert_gold_pair_of_a_subset_is_scorable(tmp_path: Path) -> None:
    gold = _write(tmp_path / "gold.json", [_gold(i) for i in range(8)])
    out = tmp_path / "sub.csv"
    assert main(["convert", str(_preds(tmp_path, first=5)), "--to", str(out), "--gold", str(gold)]) == 0
    assert check_official_rows(tmp_path / "sub_official_submission.csv") == []


def test_eval_writes_no_official_pair_it_cannot_score(tmp_path: Path) -> None:
    gold = _write(tmp_path / "gold.json", [_gold(i) for i in range(8)])
    out = tmp_path / "eval"
    assert main(["eval", "--pred", str(_preds(tmp_path, first=5)), "--gold", str(gold), "--claims-range", "5:8",
                 "--out", str(out), "--workers", "1"]) == 0
    assert not (out / "official_submission.csv").exists()
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    assert "no evidence" in json.dumps(metrics)


def test_convert_refuses_a_gold_claim_without_questions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gold = _write(tmp_path / "gold.json", [_gold(0), _gold(1, questions=[])])
    assert main(["convert", str(gold), "--to", str(tmp_path / "sol.csv")]) == 2
    err = capsys.readouterr().err
    assert "gold.json" in err and "claim 1" in err and "Traceback" not in err
    assert not (tmp_path / "sol.csv").exists()


def test_eval_names_the_gold_file_of_an_unlabelled_claim(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """eval's one-line error for a gold claim with a null label named the claim, not the file."""
    unlabelled = {**_gold(1), "label": None}
    gold = _write(tmp_path / "gold.json", [_gold(0), unlabelled])
    assert main(["eval", "--pred", str(_preds(tmp_path)), "--gold", str(gold), "--out", str(tmp_path / "e")]) == 2
    err = capsys.readouterr().err
    assert "gold.json: claim 1" in err and "Traceback" not in err


def test_convert_refuses_a_leaderboard_csv_with_a_duplicate_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It wrote a predictions JSON with two entries for one claim, which eval and convert then refuse."""
    evi = "Q?\t\t\nA.\t\t\n\n"
    src = tmp_path / "dup.csv"
    src.write_text(f'id,claim,evi,label,split\n0,c,"{evi}",Refuted,pred\n0,c,"{evi}",Refuted,pred\n', encoding="utf-8")
    assert main(["convert", str(src), "--to", str(tmp_path / "dup.json")]) == 2
    err = capsys.readouterr().err
    assert "dup.csv: data row 2 (id 0)" in err and "duplicate" in err and "Traceback" not in err
    assert not (tmp_path / "dup.json").exists()


@pytest.mark.parametrize("content", ["[]", "id,claim,evi,label,split\n"])
def test_eval_refuses_a_gold_file_without_claims(tmp_path: Path, content: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """An empty gold file scored 0 claims, exit 0 (with an empty predictions file too)."""
    gold = tmp_path / ("gold.json" if content == "[]" else "gold.csv")
    gold.write_text(content, encoding="utf-8")
    pred = _write(tmp_path / "pred.json", [])
    assert main(["eval", "--pred", str(pred), "--gold", str(gold), "--out", str(tmp_path / "e")]) == 2
    assert f"{gold}: holds no gold claims" in capsys.readouterr().err
    assert not (tmp_path / "e").exists()


@pytest.mark.parametrize(("evi", "problem"), [("", "evi is empty"), ("no separators", "0 question-answer separators")])
def test_a_leaderboard_row_the_scorer_cannot_read(tmp_path: Path, evi: str, problem: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """convert wrote such a row to a predictions JSON the official converter turns back into
    an unreadable CSV; eval scored it without a word."""
    good = "Q?\t\t\nA.\t\t\n\n"
    src = tmp_path / "sub.csv"
    src.write_text(f'id,claim,evi,label,split\n0,c,"{good}",Refuted,pred\n1,c,"{evi}",Refuted,pred\n', encoding="utf-8")
    assert main(["convert", str(src), "--to", str(tmp_path / "sub.json")]) == 2
    err = capsys.readouterr().err
    assert "sub.csv: data row 2 (id 1): the official scorer cannot read this row" in err and problem in err
    assert not (tmp_path / "sub.json").exists()
    gold = _write(tmp_path / "gold.json", [_gold(0), _gold(1)])
    out = tmp_path / "e"
    assert main(["eval", "--pred", str(src), "--gold", str(gold), "--out", str(out), "--workers", "1"]) == 0
    assert "notes" in capsys.readouterr().out
    notes = json.loads((out / "metrics.json").read_text(encoding="utf-8"))["notes"]
    assert any("official scorer would stop on it: row 2 (id '1')" in n and problem in n for n in notes)
