"""Predictions JSON as ``eval`` and ``convert`` read it: one shared validation.

Audit findings: eval's own JSON reader
was looser than convert's: a ``claim_id`` of 1.5 only gave an "unknown id" warning and a
null claim became the text "None".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sanctuary_local.cli import main as cli_main
from sanctuary_local.errors import UserError
from sanctuary_local.evaluation.inputs import MISSING_LABEL, load_predictions
from sanctuary_local.io.predictions import read_predictions_json
from sanctuary_local.records import NEE, REFUTED


def _entry(**over: object) -> dict[str, object]:
    entry: dict[str, object] = {"claim_id": 0, "claim": "The moon is cheese.", "pred_label": REFUTED,
                                "evidence": [{"question": "Is the moon cheese?", "answer": "No, rock."}]}
    return {k: v for k, v in (entry | over).items() if v is not ...}


def _write(path: Path, entries: list[dict[str, object]]) -> Path:
    path.write_text(json.dumps(entries), "utf-8")
    return path


def _gold(path: Path) -> Path:
    rows = "".join(f'{i},c{i},"Q?\t\t\nA.\t\t\n\n",Refuted,gold\r\n' for i in range(3))
    path.write_text("id,claim,evi,label,split\r\n" + rows, "utf-8")
    return path


def _both_refuse(path: Path, match: str) -> None:
    """``convert``'s reader and ``eval``'s give the same one-line error."""
    with pytest.raises(UserError, match=match) as conv:
        read_predictions_json(path)
    with pytest.raises(UserError, match=match) as ev:
        load_predictions(path)
    assert str(conv.value) == str(ev.value) and "\n" not in str(ev.value)


def test_a_runs_own_predictions_with_dataset_ids_read_back_by_claim_index(tmp_path: Path) -> None:
    """A claims file may carry its dataset's ids (500 for its first claim): a run writes
    claim_index 0 (the position it read) and claim_id 500, and every reader takes the
    claim_index; a refusal there (tried, then reverted) made report, serve, convert and eval
    refuse the project's own output."""
    from sanctuary_local.io.claims import read_claims
    from sanctuary_local.io.predictions import write_predictions_json
    from sanctuary_local.records import Prediction

    claims_file = _write(tmp_path / "subset.json", [{"claim_id": 500 + i, "claim": f"Claim {i}.", "label": REFUTED}
                                                    for i in range(2)])
    claims = read_claims(claims_file)
    preds = [Prediction(c.index, c.claim_id, c.text, REFUTED, (), "because") for c in claims]
    path = write_predictions_json(preds, tmp_path / "predictions.json")
    assert [(e["claim_index"], e["claim_id"]) for e in json.loads(path.read_text())] == [(0, 500), (1, 501)]
    assert [p.claim_index for p in read_predictions_json(path)] == [0, 1]
    assert [e.claim_id for e in load_predictions(path)] == ["0", "1"]


def test_claim_index_with_an_agreeing_or_non_index_claim_id_is_read(tmp_path: Path) -> None:
    path = _write(tmp_path / "p.json", [_entry(claim_id="007", claim_index=7), _entry(claim_id="claim-3", claim_index=3),
                                        _entry(claim_id=None, claim_index=5), _entry(claim_id=..., claim_index=6)])
    assert [p.claim_index for p in read_predictions_json(path)] == [7, 3, 5, 6]
    assert [e.claim_id for e in load_predictions(path)] == ["7", "3", "5", "6"]


def test_eval_reads_json_as_strictly_as_convert(tmp_path: Path) -> None:
    _both_refuse(_write(tmp_path / "f.json", [_entry(claim_id=1.5)]), "entry 0: field 'claim_id' must be a string or an integer")
    _both_refuse(_write(tmp_path / "n.json", [_entry(claim=None)]), "entry 0: missing or non-string required field 'claim'")
    _both_refuse(_write(tmp_path / "b.json", [_entry(claim_id=True)]), "entry 0: field 'claim_id' must be")
    _both_refuse(_write(tmp_path / "e.json", [_entry(evidence=[{"question": "q", "answer": "a", "score": "x"}])]),
                 "entry 0, evidence 0: field 'score' must be a number")
    _both_refuse(_write(tmp_path / "d.json", [_entry(), _entry()]), "entry 0 and entry 1 both predict claim 0")
    for bad in (0, False, "", {}):  # were read as "no evidence"
        _both_refuse(_write(tmp_path / "z.json", [_entry(evidence=bad)]), "entry 0: field 'evidence' must be a list")
    _both_refuse(_write(tmp_path / "z.json", [_entry(evidence_all=0)]), "entry 0: field 'evidence_all' must be a list")
    assert load_predictions(_write(tmp_path / "ok.json", [_entry(evidence=None)]))[0].qa_pairs == ()


def test_eval_keeps_its_label_variants_and_missing_labels(tmp_path: Path) -> None:
    path = _write(tmp_path / "p.json", [_entry(pred_label="NEI"), _entry(claim_id=1, pred_label=None),
                                        _entry(claim_id=2, pred_label=..., label="refutes"),
                                        _entry(claim_id="claim-9")])
    assert [(e.claim_id, e.label) for e in load_predictions(path)] == [
        ("0", NEE), ("1", MISSING_LABEL), ("2", REFUTED), ("claim-9", REFUTED)]
    with pytest.raises(UserError, match="entry 0: unknown label 'Perhaps'"):
        load_predictions(_write(tmp_path / "q.json", [_entry(pred_label="Perhaps")]))


def test_eval_cli_refuses_in_one_line_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gold = _gold(tmp_path / "gold.csv")
    for name, entries in (("float.json", [_entry(claim_id=1.5)]), ("null.json", [_entry(claim=None)])):
        out = tmp_path / f"out_{name}"
        rc = cli_main(["eval", "--pred", str(_write(tmp_path / name, entries)), "--gold", str(gold), "--out", str(out),
                       "--workers", "1"])
        err = capsys.readouterr().err.strip()
        assert rc == 2 and err.startswith("error: ") and "\n" not in err and name in err, err
        assert not out.exists()
        assert cli_main(["convert", str(tmp_path / name), "--to", str(tmp_path / f"{name}.csv")]) == 2
        assert capsys.readouterr().err.strip() == err  # the same line
        assert not (tmp_path / f"{name}.csv").exists()
