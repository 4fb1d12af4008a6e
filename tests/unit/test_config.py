"""``load_config``: a profile or ``--set`` value of the wrong type is one line naming its key."""

from __future__ import annotations

import re

import pytest

from sanctuary_local.config.settings import PROFILE_NAMES, load_config
from sanctuary_local.errors import UserError


@pytest.mark.parametrize("name", PROFILE_NAMES)
def test_every_shipped_profile_passes_the_type_checks(name: str) -> None:
    assert load_config(name).profile == name


@pytest.mark.parametrize("override,message", [
    ({"hyde": {"sampling": {"max_tokens": "abc"}}}, "hyde.sampling.max_tokens must be a whole number, got 'abc'"),
    ({"hyde": {"sampling": {"max_tokens": 1.5}}}, "hyde.sampling.max_tokens must be a whole number, got 1.5"),
    ({"retrieval": {"dedup_threshold": "high"}}, "retrieval.dedup_threshold must be a number, got 'high'"),
    ({"verdict": {"trained_model": 5}}, "verdict.trained_model must be a string, got 5"),
    ({"retrieval": {"top_k_segments": True}}, "retrieval.top_k_segments must be a whole number, got True"),
])
def test_a_value_of_the_wrong_type_is_one_line_naming_the_key(override: dict, message: str) -> None:
    """--set parses values as TOML and falls back to the raw string: a wrong type was taken as
    it came and failed only when the model or the retriever used it."""
    with pytest.raises(UserError, match=re.escape(message)):
        load_config("cpu", override)


def test_values_of_the_right_type_still_load() -> None:
    cfg = load_config("cpu", {"retrieval": {"dedup_threshold": 1, "workers": None}, "hyde": {"sampling": {"max_tokens": 64}}})
    assert cfg.retrieval.dedup_threshold == 1 and cfg.retrieval.workers is None and cfg.hyde.sampling.max_tokens == 64
