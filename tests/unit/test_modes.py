"""modes.MODES, the one table of the optional modes: the stages a run executes and the steps
stage 3 takes come from it, in the order the switches gave before."""

from __future__ import annotations

import pytest

from sanctuary_local.config.settings import load_config
from sanctuary_local.modes import MODES, enabled_modes, run_stages, verdict_steps
from sanctuary_local.modes.citations import annotate_citations, check_and_reask
from sanctuary_local.modes.decompose import reask_parts


@pytest.mark.parametrize("decompose", [False, True])
@pytest.mark.parametrize("followup", [False, True])
def test_run_stages_place_each_enabled_mode_s_own_stage(decompose: bool, followup: bool) -> None:
    cfg = load_config("cpu-fast", {"verdict": {"mode": "paper"}, "decompose": {"enabled": decompose},
                                   "followup": {"enabled": followup}})
    assert run_stages(cfg) == (*(("decompose",) if decompose else ()), "hyde", "retrieval",
                               *(("followup",) if followup else ()), "verdict")
    assert enabled_modes(cfg) == [m for m, on in (("decompose", decompose), ("followup", followup)) if on]


def test_verdict_steps_come_in_the_table_s_order() -> None:
    cited = load_config("cpu-fast", {"verdict": {"mode": "paper", "citations": True}}).verdict
    assert verdict_steps(cited, decomposed=True).before_label == (reask_parts, check_and_reask)
    assert verdict_steps(cited).after_label == (annotate_citations,)
    assert verdict_steps(load_config("cpu-fast").verdict) == verdict_steps(load_config("cpu-fast").verdict, False)
    assert not verdict_steps(load_config("cpu-fast").verdict).before_label
    assert list(MODES) == ["decompose", "followup", "citations", "trust"]
