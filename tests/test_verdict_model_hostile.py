"""`verdict-model` as a hostile user drives it: bad training files, --out paths that hold the
user's files or the inputs, tampered model directories, bad decision rules and --json paths.
Every one is one error line naming the file, exit 2, and nothing written (no model, not half
of one). Real TF-IDF models throughout, trained on examples/claims.json made six times over."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sanctuary_local.cli import main

REPO = Path(__file__).resolve().parents[1]
WORDS = ["reportedly", "officially", "in 2020", "according to posts", "experts say", "again"]


def _claims(path: Path, copies: int = 6) -> Path:
    base = json.loads((REPO / "examples" / "claims.json").read_text())
    path.write_text(json.dumps([dict(e, claim=f"{e['claim']} ({WORDS[k]})") for k in range(copies) for e in base]))
    return path


def _error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """The one error line of a command that must fail as a user error (exit 2, no traceback)."""
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "Traceback" not in err and err.startswith("error: "), err
    return " ".join(err.split())


def _listing(d: Path) -> list[str]:
    return sorted(p.relative_to(d).as_posix() for p in d.rglob("*"))


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("hostile")
    assert main(["verdict-model", "train", str(_claims(d / "train.json")), "--out", str(d / "model")]) in (0, None)
    return d / "model"


def test_an_answer_field_of_the_wrong_type_is_one_line_and_no_model(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(_claims(tmp_path / "ok.json").read_text())
    data[5]["questions"][0]["answers"][0]["boolean_explanation"] = 7
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    before = _listing(tmp_path)
    err = _error(capsys, ["verdict-model", "train", str(bad), "--out", str(tmp_path / "m")])
    assert f"{bad}: claim 5, question 0, answer 0: field 'boolean_explanation'" in err
    assert _listing(tmp_path) == before
