"""``--claims-range a:b`` (run, eval, convert, report) and ``--indices a:b`` (verdict-model).

Audit finding: a negative bound was accepted as a claim index, so a Python-style ``-5:``
("the last five") selected every claim (a whole run, or a whole file scored), ``5``
without a colon meant "5 onwards", and ``5:2`` only failed later as "selects none".
These tests fail on the code before.
"""

from __future__ import annotations

import pytest

from sanctuary_local.cli.verdict_model_cmd import _range
from sanctuary_local.errors import UserError
from sanctuary_local.io.claims import parse_claims_range
from sanctuary_local.run.prepare import select_claims
from sanctuary_local.records import Claim


@pytest.mark.parametrize("spec", ["-5:", "-1:2", "5", "a:b", "1_0:20", "1.5:3", "٣:5"])
def test_malformed_ranges_are_one_clear_error(spec: str) -> None:
    with pytest.raises(UserError, match="must look like a:b with 0 <= a < b"):
        parse_claims_range(spec)


@pytest.mark.parametrize("spec", ["5:2", "2:2"])
def test_empty_ranges_say_so(spec: str) -> None:
    with pytest.raises(UserError, match="is empty"):
        parse_claims_range(spec)


@pytest.mark.parametrize(("spec", "want"), [("0:2", range(0, 2)), (" 3 : 5 ", range(3, 5)), (":4", range(0, 4))])
def test_good_ranges(spec: str, want: range) -> None:
    assert parse_claims_range(spec) == want
    assert parse_claims_range("7:")[0] == 7 and 10**12 in parse_claims_range(":")


def test_run_does_not_take_minus_five_for_every_claim() -> None:
    claims = [Claim(index=i, text=f"claim {i}") for i in range(10)]
    with pytest.raises(UserError):
        select_claims(claims, "-5:", None)


@pytest.mark.parametrize("spec", ["-1:2", "5:2", "x"])
def test_verdict_model_indices_keep_their_own_message(spec: str) -> None:
    with pytest.raises(UserError, match="--indices must look like a:b"):
        _range(spec)
