"""``llm.parallel`` (issue 69): checked as it is read, sizes a stage's waves, and is an
execution setting (a run resumes under another N). The batched decoding itself runs the real
0.5B model in tests/e2e/test_batched_stage1.py."""

from __future__ import annotations

import pytest

from sanctuary_local.config.llm import LLMConfig
from sanctuary_local.config.settings import load_config
from sanctuary_local.errors import UserError
from sanctuary_local.run.fingerprint import is_execution_setting
from sanctuary_local.run.stages import pilot_size
from sanctuary_local.run.waves import wave_size


def test_parallel_is_validated_with_the_key_named() -> None:
    assert load_config("cpu", {"hyde": {"llm": {"parallel": 4}}}).hyde.llm.parallel == 4
    assert load_config("cpu").hyde.llm.parallel == 1
    for bad in (0, -2, 65):
        with pytest.raises(UserError, match=r"hyde.llm.parallel must be an integer in \[1, 64\]"):
            load_config("cpu", {"hyde": {"llm": {"parallel": bad}}})
    with pytest.raises(UserError, match="verdict.llm.parallel"):
        load_config("cpu", {"verdict": {"llm": {"parallel": 0}}})
    with pytest.raises(UserError, match="parallel"):  # the wrong type, refused as it is read
        load_config("cpu", {"hyde": {"llm": {"parallel": "four"}}})


def test_waves_hold_two_claims_per_slot_unless_batch_size_says_otherwise() -> None:
    assert wave_size(LLMConfig(backend="llama_cpp")) == 1
    assert wave_size(LLMConfig(backend="llama_cpp", parallel=4)) == 8
    assert wave_size(LLMConfig(backend="llama_cpp", parallel=4, batch_size=3)) == 3
    assert wave_size(LLMConfig(backend="vllm", parallel=4)) == 256  # llama.cpp's knob only


def test_parallel_is_an_execution_setting() -> None:
    assert is_execution_setting("hyde.llm.parallel") and is_execution_setting("verdict.llm.parallel")


def test_a_budget_pilot_holds_at_least_one_batch() -> None:
    assert [pilot_size(n) for n in (1, 10, 100, 1000)] == [1, 2, 5, 8]
    assert pilot_size(100, parallel=8) == 8 and pilot_size(1000, parallel=16) == 16 and pilot_size(3, parallel=8) == 3
