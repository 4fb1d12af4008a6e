"""``verdict-model train --c inf`` wrote ``"c": Infinity`` into model_card.json: not JSON
(orjson, jq and browsers refuse it; only Python's json module reads it). Audit finding;
non-finite --c / --learning-rate are now one error line and no model directory.
Fails on the code before."""

from __future__ import annotations

from pathlib import Path

import pytest

from sanctuary_local.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize(("flag", "value"), [("--c", "inf"), ("--c", "1e999"), ("--learning-rate", "nan"),
                                             ("--learning-rate", "-inf"), ("--learning-rate", "0")])
def test_non_finite_hyperparameters_are_refused(tmp_path: Path, flag: str, value: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "model"
    assert main(["verdict-model", "train", str(EXAMPLES / "claims.json"), "--out", str(out), flag, value]) == 2
    assert f"{flag} must be a finite number > 0" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("indices", ["0:100", "100:150"])
def test_fit_rule_refuses_a_range_past_the_claims(tmp_path: Path, indices: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """fit-rule sliced past the end: '0:100' of a 5-claim file fitted on 5 and recorded
    'fitted_on [0:100]'; '100:150' fitted on none and replaced the model's rule with zero
    offsets. Now one error line, before the model is read."""
    claims = EXAMPLES / "claims.json"
    model = tmp_path / "model"
    assert main(["verdict-model", "train", str(claims), "--out", str(model)]) == 0  # TF-IDF: seconds
    (model / "decision_rule.json").write_text('{"offsets": [0.5, 0, 0, 0]}', encoding="utf-8")
    assert main(["verdict-model", "fit-rule", str(model), "--claims", str(claims), "--indices", indices]) == 2
    assert f"--indices {indices} is outside its" in capsys.readouterr().err
    assert (model / "decision_rule.json").read_text("utf-8") == '{"offsets": [0.5, 0, 0, 0]}'


def test_evidence_refuses_a_range_past_the_claims(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """'verdict-model evidence --indices 100:150' of a 5-claim file went on to retrieve for no claim."""
    out = tmp_path / "evidence.jsonl"
    assert main(["verdict-model", "evidence", str(EXAMPLES / "claims.json"), "--store", str(EXAMPLES / "store"),
                 "--out", str(out), "--indices", "100:150"]) == 2
    assert "--indices 100:150 selects none of its claims" in capsys.readouterr().err
    assert not out.exists()
