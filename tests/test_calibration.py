"""Label calibration (issue 26, ``stages/calibration.py``): fitting on synthetic scores with
a known bias, the model/prompt identity check, the file round trip and its errors, and
which configs use a calibration at all. No model runs: scores are synthetic."""

from __future__ import annotations

import json
import math
import random
from collections import Counter

import pytest

from sanctuary_local.config import VerdictConfig
from sanctuary_local.errors import UserError
from sanctuary_local.records import LABELS
from sanctuary_local.stages.calibration import (
    Calibration, FitExample, fit, fit_logistic, load_calibration, model_sha256, prepared_calibration, save_calibration,
)
from sanctuary_local.stages.verdict_prompt import config_prompt_hash

SHA_A, SHA_B = "a" * 64, "b" * 64


def _log_softmax(z: list[float]) -> tuple[float, ...]:
    m = max(z)
    t = m + math.log(sum(math.exp(v - m) for v in z))
    return tuple(v - t for v in z)


def synthetic(n: int, seed: int, bias: tuple[float, ...] = (0.0, 2.0, 0.0, 0.0), signal: float = 2.0,
              provisional_right: float | None = None) -> list[FitExample]:
    """Balanced gold labels; the raw scores favour the gold label by ``signal`` but every
    claim's scores are shifted by ``bias`` (here: towards Refuted), plus noise. With
    ``provisional_right`` the stage-1 label is the gold one with that probability."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        y = i % 4
        z = [signal * (k == y) + bias[k] + rng.gauss(0.0, 1.0) for k in range(4)]
        prov = None
        if provisional_right is not None:
            prov = LABELS[y] if rng.random() < provisional_right else LABELS[rng.choice([k for k in range(4) if k != y])]
        out.append(FitExample(_log_softmax(z), prov, LABELS[y]))
    return out


def predicted(examples: list[FitExample], cal: Calibration | None) -> list[str]:
    def best(e: FitExample) -> str:
        scores = cal.probabilities(e.logprobs, e.provisional) if cal is not None else e.logprobs
        return LABELS[max(range(4), key=lambda k: scores[k])]

    return [best(e) for e in examples]


def accuracy(examples: list[FitExample], cal: Calibration | None) -> float:
    return sum(p == e.gold for p, e in zip(predicted(examples, cal), examples)) / len(examples)


def test_fit_undoes_a_per_class_bias_and_raises_accuracy():
    train, test = synthetic(200, seed=1), synthetic(400, seed=2)
    cal = fit(train, SHA_A, "h", prior=False)
    raw, calibrated = accuracy(test, None), accuracy(test, cal)
    assert calibrated >= raw + 0.08, (raw, calibrated)
    # the bias towards Refuted is found and taken back: its bias is the lowest by a margin
    refuted = LABELS.index("Refuted")
    assert all(cal.bias[refuted] < b - 0.5 for k, b in enumerate(cal.bias) if k != refuted), cal.bias
    # the predicted label distribution moves towards the (balanced) gold one
    raw_share = Counter(predicted(test, None))["Refuted"] / len(test)
    cal_share = Counter(predicted(test, cal))["Refuted"] / len(test)
    # (part of the way: the L2 penalty on the bias holds it back on purpose)
    assert raw_share > 0.4 and abs(cal_share - 0.25) < abs(raw_share - 0.25) - 0.1, (raw_share, cal_share)
    assert cal.prior_weight == 0.0 and cal.temperature > 0
    assert cal.fit["n"] == 200 and cal.fit["gold_counts"] == dict.fromkeys(LABELS, 50)


def test_fit_learns_to_trust_an_informative_stage_one_label():
    # raw scores carry no signal; the stage-1 label is right 80% of the time
    train = synthetic(200, seed=3, bias=(0.0,) * 4, signal=0.0, provisional_right=0.8)
    test = synthetic(400, seed=4, bias=(0.0,) * 4, signal=0.0, provisional_right=0.8)
    cal = fit(train, SHA_A, "h", prior=True)
    assert cal.prior_weight > 1.0 and accuracy(test, cal) > accuracy(test, None) + 0.3
    assert fit(train, SHA_A, "h", prior=False).prior_weight == 0.0


def test_fit_refuses_an_empty_range():
    with pytest.raises(UserError, match="no claims to fit on"):
        fit([], SHA_A, "h")


def test_probabilities_survive_unscored_labels():
    cal = Calibration(SHA_A, "h", 0.5, (0.1, -0.2, 0.0, 0.3))
    probs = cal.probabilities((-0.2, -math.inf, -1.5, -math.inf), None)
    assert all(math.isfinite(p) for p in probs) and math.isclose(sum(probs), 1.0)
    assert probs[1] < 1e-6 and probs[3] < 1e-6 and probs[0] > probs[2]


def test_check_refuses_another_model_or_prompt_in_one_line():
    cal = Calibration(SHA_A, "prompthash000001")
    cal.check(SHA_A, "prompthash000001", "cal.json")  # the same identity passes
    with pytest.raises(UserError) as exc:
        cal.check(SHA_B, "prompthash000001", "cal.json")
    msg = str(exc.value)
    assert "\n" not in msg and SHA_A[:16] in msg and SHA_B[:16] in msg and msg.startswith("cal.json")
    with pytest.raises(UserError) as exc:
        cal.check(SHA_A, "prompthash000002", "cal.json")
    msg = str(exc.value)
    assert "\n" not in msg and "prompthash000001" in msg and "prompthash000002" in msg and "cal.json" in msg


def test_save_load_round_trip(tmp_path):
    cal = fit(synthetic(80, seed=5, provisional_right=0.6), SHA_A, "h" * 16, info={"claims": "dev.json", "range": "100:180"})
    path = tmp_path / "sub" / "cal.json"
    save_calibration(cal, path)
    assert not path.with_name("cal.json.tmp").exists()
    back = load_calibration(str(path))
    assert back == cal and back.fit["range"] == "100:180"
    assert json.loads(path.read_text())["labels"] == list(LABELS)
    e = FitExample((-0.3, -2.0, -1.0, -4.0), "Refuted", "Supported")
    assert back.probabilities(e.logprobs, e.provisional) == cal.probabilities(e.logprobs, e.provisional)


@pytest.mark.parametrize("content", [
    "{not json",
    "[1, 2, 3]",
    json.dumps({"model_sha256": SHA_A, "prompt_hash": "h", "temperature": 1.0}),  # no bias
    json.dumps({"model_sha256": SHA_A, "prompt_hash": "h", "temperature": 1.0, "bias": [0, 0, 0]}),
    json.dumps({"model_sha256": SHA_A, "prompt_hash": "h", "temperature": 0.0, "bias": [0, 0, 0, 0]}),
    json.dumps({"model_sha256": SHA_A, "prompt_hash": "h", "temperature": "hot", "bias": [0, 0, 0, 0]}),
    json.dumps({"model_sha256": SHA_A, "prompt_hash": "h", "temperature": 1.0, "bias": [0, 0, 0, 0],
                "labels": ["True", "False", "Unknown", "Mixed"]}),
])
def test_a_malformed_file_is_a_user_error_naming_it(tmp_path, content):
    path = tmp_path / "broken-cal.json"
    path.write_text(content, "utf-8")
    with pytest.raises(UserError, match="broken-cal.json"):
        load_calibration(str(path))


def test_a_missing_calibration_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="no-such-cal.json"):
        load_calibration(str(tmp_path / "no-such-cal.json"))


def test_prepared_calibration_only_in_scored_mode(tmp_path):
    missing = str(tmp_path / "absent.json")
    assert prepared_calibration(VerdictConfig(calibration=missing)) is None  # paper mode never reads it
    assert prepared_calibration(VerdictConfig(mode="scored")) is None  # raw scores
    cfg = VerdictConfig(mode="scored", calibration=missing)
    with pytest.raises(UserError, match="absent.json"):
        prepared_calibration(cfg)
    sha = model_sha256(cfg.llm.model)  # a packaged model: its manifest hash, no file needed
    path = tmp_path / "cal.json"
    save_calibration(Calibration(sha, config_prompt_hash(cfg), 1.5, (0.1, 0.2, 0.3, 0.4)), path)
    cfg.calibration = str(path)
    got = prepared_calibration(cfg)
    assert got is not None and got.bias == (0.1, 0.2, 0.3, 0.4)
    # fitted for the scored prompt: refused for the scored prompt with reasoning (another hash)
    cfg.reasoning_tokens = 64
    with pytest.raises(UserError, match="prompt hash"):
        prepared_calibration(cfg)
    cfg.reasoning_tokens = 0
    cfg.llm.model = "packaged:qwen2.5-coder-0.5b-instruct-q4-k-m-gguf"
    with pytest.raises(UserError) as exc:
        prepared_calibration(cfg)
    assert sha[:16] in str(exc.value) and model_sha256(cfg.llm.model)[:16] in str(exc.value)


def test_logistic_calibration_uses_both_the_scores_and_the_stage_one_label(tmp_path):
    """The logistic model (the cpu default) undoes the bias of the scores and learns to trust
    an informative stage-1 label; it survives a save/load round trip, and a weight matrix of
    the wrong shape is refused."""
    train = synthetic(200, seed=5, provisional_right=0.6)
    test = synthetic(400, seed=6, provisional_right=0.6)
    cal = fit_logistic(train, SHA_A, "h", c=1.0)
    assert cal.kind == "logistic" and len(cal.score_weights) == 4 and len(cal.prior_weights) == 4
    scaling = fit(train, SHA_A, "h", prior=False)
    assert accuracy(test, cal) > accuracy(test, None) + 0.1
    assert accuracy(test, cal) > accuracy(test, scaling)  # the stage-1 label adds what the scores lack
    path = tmp_path / "cal.json"
    save_calibration(cal, path)
    assert load_calibration(str(path)) == cal
    bad = json.loads(path.read_text("utf-8"))
    bad["score_weights"] = bad["score_weights"][:3]
    path.write_text(json.dumps(bad), "utf-8")
    with pytest.raises(UserError, match="4 x 4"):
        load_calibration(str(path))


def test_logistic_calibration_never_picks_a_label_absent_from_the_fit():
    train = [e for e in synthetic(120, seed=7, provisional_right=0.7) if e.gold != LABELS[2]]
    cal = fit_logistic(train, SHA_A, "h")
    assert LABELS[2] not in set(predicted(synthetic(200, seed=8, provisional_right=0.7), cal))


@pytest.mark.parametrize("profile", ["cpu", "cpu-fast", "cpu-gemma", "paper"])
def test_every_shipped_profile_accepts_its_own_calibration(profile):
    """A profile whose prompt, penalty or model changes without its calibration being refit
    would stop every run at its first claim: its shipped calibration must match it."""
    from sanctuary_local.config import load_config

    cfg = load_config(profile).verdict
    cal = prepared_calibration(cfg)
    assert (cal is not None) == bool(cfg.calibration) == (profile == "cpu")


def test_the_cpu_calibration_is_refused_with_the_former_prompt():
    from sanctuary_local.config import load_config

    cfg = load_config("cpu", {"verdict": {"prompt": "verdict.txt"}}).verdict
    with pytest.raises(UserError, match="prompt"):
        prepared_calibration(cfg)
    former = load_config("cpu", {"verdict": {"prompt": "verdict.txt", "sampling": {"repetition_penalty": 1.0},
                                             "calibration": "cpu_scored_reasoning.json"}}).verdict
    assert prepared_calibration(former) is not None
