"""Shared by the verdict-model command tests (hostile inputs, outputs): a claims file of the
examples made several times over, and the one error line of a command that must fail."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sanctuary_local.cli import main

REPO = Path(__file__).resolve().parents[2]
WORDS = ["reportedly", "officially", "in 2020", "according to posts", "experts say", "again"]


def claims_file(path: Path, copies: int = 6) -> Path:
    """Example claims made ``copies`` times over, on one line (as json.dump writes them)."""
    base = json.loads((REPO / "examples" / "claims.json").read_text())
    path.write_text(json.dumps([dict(e, claim=f"{e['claim']} ({WORDS[k]})") for k in range(copies) for e in base]))
    return path


def error_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """The one error line of a command that must fail as a user error (exit 2, no traceback)."""
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "Traceback" not in err and err.startswith("error: "), err
    return " ".join(err.split())
