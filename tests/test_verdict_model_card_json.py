"""``verdict-model train --c inf`` wrote ``"c": Infinity`` into model_card.json: not JSON
(orjson, jq and browsers refuse it; only Python's json module reads it). Audit finding;
non-finite --c / --learning-rate are now one error line and no model directory.
Fails on the code before."""

from __future__ import annotations

from pathlib import Path

import pytest

from sanctuary_local.cli import main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize(("flag", "value"), [("--c", "inf"), ("--c", "1e999"), ("--learning-rate", "nan"),
                                             ("--learning-rate", "-inf"), ("--learning-rate", "0")])
def test_non_finite_hyperparameters_are_refused(tmp_path: Path, flag: str, value: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "model"
    assert main(["verdict-model", "train", str(EXAMPLES / "claims.json"), "--out", str(out), flag, value]) == 2
    assert f"{flag} must be a finite number > 0" in capsys.readouterr().err
    assert not out.exists()
