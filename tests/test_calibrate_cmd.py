"""``sanctuary-local calibrate RUN_DIR``: a calibration fitted on a scored run's label
scores, keyed by the run's model and prompt, refused for paper-mode runs and bad input.

The run directory is written here record by record (its config.json and stage-3 file, as
`run` writes them); the fit itself is real (scipy), and the written file is loaded back
through the same path a profile uses (``prepared_calibration``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sanctuary_local.cli import main
from sanctuary_local.config import load_config
from sanctuary_local.records import LABELS, Prediction
from sanctuary_local.runstate import STAGE_FILES, StageFile
from sanctuary_local.stages.calibration import load_calibration, model_sha256, prepared_calibration
from sanctuary_local.stages.verdict_prompt import config_prompt_hash

SCORED = {"verdict": {"mode": "scored"}}


def _claims(path: Path, gold: list[str]) -> Path:
    path.write_text(json.dumps([{"claim": f"claim number {i}", "label": g, "questions": []} for i, g in enumerate(gold)]),
                    "utf-8")
    return path


def _run_dir(tmp: Path, mode: str, scores: list[list[float]], provisional: list[str]) -> Path:
    cfg = load_config("cpu", {"verdict": {"mode": mode}})
    run = tmp / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(cfg.to_dict()), "utf-8")
    sf = StageFile(run / STAGE_FILES["verdict"], Prediction.from_dict)
    for i, (s, prov) in enumerate(zip(scores, provisional, strict=True)):
        meta = {"verdict_prompt_hash": config_prompt_hash(cfg.verdict),
                "label_scores": {"logprobs": s, "labels": list(LABELS)}} if mode == "scored" else {}
        sf.append(i, Prediction(i, str(i), f"claim number {i}", LABELS[max(range(4), key=lambda k: s[k])],
                                provisional_label=prov, meta=meta))
    return run


def test_calibrate_fits_a_run_and_the_profile_path_accepts_it(tmp_path: Path, capsys) -> None:
    # Raw scores always favour Refuted; gold is Supported exactly when stage 1 said so.
    gold = ["Supported", "Refuted"] * 10
    scores = [[-2.0, -0.5, -2.5, -3.0]] * 20
    run = _run_dir(tmp_path, "scored", scores, gold)
    out = tmp_path / "cal" / "fitted.json"
    claims = _claims(tmp_path / "c.json", gold)
    assert main(["calibrate", str(run), "--claims", str(claims), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "fitted on 20 claims (0:20)" in printed and "calibrated: accuracy 1.000" in printed, printed
    cal = load_calibration(str(out))
    cfg = load_config("cpu", {"verdict": {"mode": "scored", "calibration": str(out)}})
    assert cal.prompt_hash == config_prompt_hash(cfg.verdict)
    assert cal.model_sha256 == model_sha256(cfg.verdict.llm.model, cfg.models_dir)
    # the default logistic model learned that the stage-1 label is what decides
    assert cal.kind == "logistic" and cal.prior_weights[0][0] > cal.prior_weights[0][1]
    scaling = tmp_path / "cal" / "scaling.json"
    assert main(["calibrate", str(run), "--claims", str(claims), "--out", str(scaling), "--model", "scaling"]) == 0
    assert load_calibration(str(scaling)).prior_weight > 0.5
    assert prepared_calibration(cfg.verdict, cfg.models_dir) == cal
    # The same file under another prompt (reasoning first) is refused, never applied silently.
    other = load_config("cpu", {"verdict": {"mode": "scored", "reasoning_tokens": 64, "calibration": str(out)}})
    with pytest.raises(Exception, match="prompt hash"):
        prepared_calibration(other.verdict, other.models_dir)


@pytest.mark.parametrize("case", ["paper run", "no run", "claims mismatch", "out inside run"])
def test_calibrate_refuses_bad_input_in_one_line(tmp_path: Path, capsys, case: str) -> None:
    gold = ["Supported", "Refuted", "Refuted"]
    run = _run_dir(tmp_path, "paper" if case == "paper run" else "scored", [[-1.0, -0.5, -2.0, -3.0]] * 3, gold)
    claims = _claims(tmp_path / "c.json", gold if case != "claims mismatch" else ["Refuted"])
    out = run / "cal.json" if case == "out inside run" else tmp_path / "cal.json"
    target = tmp_path / "nowhere" if case == "no run" else run
    code = main(["calibrate", str(target), "--claims", str(claims), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and len([ln for ln in err.splitlines() if ln.startswith("error:")]) == 1, err
    assert not out.exists()


def test_label_readings_read_one_scored_run_four_ways(tmp_path: Path) -> None:
    # benchmarks/label_readings.py: the run's labels, the raw argmax, stage 1's label and the
    # majority class, each scored against the same gold (here no evidence: AVeriTeC 0).
    import importlib.util

    spec = importlib.util.spec_from_file_location("label_readings", Path(__file__).parents[1] / "benchmarks" / "label_readings.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    gold = ["Supported", "Refuted", "Refuted", "Not Enough Evidence"]
    scores = [[-0.1, -2.0, -3.0, -4.0], [-2.0, -0.1, -3.0, -4.0], [-0.1, -2.0, -3.0, -4.0], [-3.0, -2.0, -0.1, -4.0]]
    run = _run_dir(tmp_path, "scored", scores, ["Refuted"] * 4)
    claims = tmp_path / "c.json"  # METEOR needs gold questions
    claims.write_text(json.dumps([{"claim": f"claim number {i}", "label": g, "questions": [
        {"question": "Is it true?", "answers": [{"answer": "Yes, it is."}]}]} for i, g in enumerate(gold)]), "utf-8")
    rows = {r["row"]: r for r in mod.readings(run, claims, (0, 1, 2, 3))}
    assert rows["raw label scores (argmax, no calibration)"]["accuracy"] == 0.75
    assert rows["the run's labels"]["predicted"] == {"Supported": 2, "Refuted": 1, "Not Enough Evidence": 1,
                                                     "Conflicting Evidence/Cherrypicking": 0}
    assert rows["stage-1 provisional label"]["accuracy"] == rows["majority class (Refuted), with the run's evidence"]["accuracy"] == 0.5
    assert all(r["averitec_0.25"] == 0.0 for r in rows.values())
    (tmp_path / "p").mkdir()
    with pytest.raises(SystemExit, match="no label scores"):
        mod.readings(_run_dir(tmp_path / "p", "paper", scores, ["Refuted"] * 4), claims, (0, 1, 2, 3))
