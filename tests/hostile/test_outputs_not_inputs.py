"""``--json`` of ``inspect`` and ``verdict-model eval`` never replaces an input.

Audit finding: ``inspect --json CLAIMS`` and ``verdict-model eval --json CLAIMS`` overwrote
the claims file with their report, ``inspect --json STORE/0.json`` a store file, and
``verdict-model eval --json MODEL/metrics.json`` added a file to the model directory, whose
card pins the hash of every file in it: the model no longer loaded ("damaged or was
changed"). Now one error line, nothing written. These tests fail on the code before.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sanctuary_local.cli import main
from sanctuary_local.verdict_model.store import resolve

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _copy(src: Path, dst: Path) -> Path:
    dst.write_bytes(src.read_bytes())
    return dst


def _store(tmp_path: Path) -> Path:
    store = tmp_path / "store"
    store.mkdir()
    for f in sorted((EXAMPLES / "store").glob("*.json")):
        _copy(f, store / f.name)
    return store


@pytest.mark.parametrize("target", ["claims", "store_file"])
def test_inspect_json_is_not_written_over_an_input(tmp_path: Path, target: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    store = _store(tmp_path)
    claims = _copy(EXAMPLES / "claims.json", tmp_path / "claims.json")
    out = claims if target == "claims" else store / "0.json"
    before = out.read_bytes()
    assert main(["inspect", "--store", str(store), "--claims", str(claims), "--json", str(out)]) == 2
    assert f"{out}: cannot write the inspect report: it " in capsys.readouterr().err
    assert out.read_bytes() == before


def test_verdict_model_eval_json_is_not_written_over_the_claims_or_into_the_model(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    claims = _copy(EXAMPLES / "claims.json", tmp_path / "claims.json")
    before = claims.read_bytes()
    model = tmp_path / "model"  # a real model: an empty folder is refused first as no model at all
    shutil.copytree(resolve("packaged:verdict-tfidf"), model)
    files = sorted(p.name for p in model.iterdir())
    assert main(["verdict-model", "eval", "--claims", str(claims), "--json", str(claims)]) == 2
    assert f"{claims}: cannot write the metrics: it is the input" in capsys.readouterr().err
    assert claims.read_bytes() == before
    assert main(["verdict-model", "eval", "--claims", str(claims), "--model", str(model),
                 "--json", str(model / "metrics.json")]) == 2
    assert "is inside the input" in capsys.readouterr().err
    assert sorted(p.name for p in model.iterdir()) == files


@pytest.mark.parametrize("dst_name", ["gold.csv", "sub.csv"])
def test_convert_never_writes_over_its_gold_file(tmp_path: Path, dst_name: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """``convert P --to X.csv --gold G``: G was overwritten when it was X itself, or the
    pair's X_official_solution.csv (both are written after the gold is read)."""
    evi = "Q?\t\t\nA.\t\t\n\n"
    gold = tmp_path / "gold.csv" if dst_name == "gold.csv" else tmp_path / "sub_official_solution.csv"
    gold.write_text("id,claim,evi,label,split\n" + "".join(f'{i},c{i},"{evi}",Refuted,gold\n' for i in range(4)),
                    encoding="utf-8")
    before = gold.read_bytes()
    pred = tmp_path / "pred.json"
    pred.write_text('[{"claim_id": 2, "claim": "c2", "evidence": [{"question": "Q?", "answer": "A."}], '
                    '"pred_label": "Refuted"}]', encoding="utf-8")
    assert main(["convert", str(pred), "--to", str(tmp_path / dst_name), "--gold", str(gold)]) == 2
    assert f"{gold}: cannot write output: it is the input" in capsys.readouterr().err
    assert gold.read_bytes() == before


def test_convert_gold_error_leaves_no_csv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A --gold lacking some of the predictions' ids exited 2 but left the main CSV behind."""
    evi = "Q?\t\t\nA.\t\t\n\n"
    gold = tmp_path / "gold.csv"
    gold.write_text("id,claim,evi,label,split\n" + "".join(f'{i},c{i},"{evi}",Refuted,gold\n' for i in range(3)),
                    encoding="utf-8")
    pred = tmp_path / "pred.json"
    pred.write_text(json.dumps([{"claim_id": i, "claim": f"c{i}", "evidence": [{"question": "Q?", "answer": "A."}],
                                 "pred_label": "Refuted"} for i in (2, 3)]), encoding="utf-8")
    out = tmp_path / "sub.csv"
    assert main(["convert", str(pred), "--to", str(out), "--gold", str(gold)]) == 2
    assert "ids are not in the solution" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gold.csv", "pred.json"]
