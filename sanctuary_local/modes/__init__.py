"""Optional modes borrowed from other systems, one module each, plugged into the stages
(docs/optional-modes.md). ``MODES`` is the one table of them: the config switch that turns a
mode on, the run stages it adds to, the steps it hands stage 3 and the part of the run
fingerprint its settings enter. The stages never import a mode; ``run/`` asks this table.

- ``decompose`` (ClaimCLAIRE, FactAgent): the claim split into parts, each part a stage-2
  query, the verdict's label the AND of the parts' labels;
- ``followup`` (HerO): a second round of questions for what the evidence left open;
- ``citations`` (GAVEL): the verdict cites its evidence, checked without a model;
- ``trust``: stage 2's evidence re-ranked by the user's weights per source.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sanctuary_local.config.settings import Config, VerdictConfig
from sanctuary_local.stages.verdict.line import ModeSteps, Step

__all__ = ["MODES", "Mode", "enabled_modes", "run_stages", "verdict_steps"]

VerdictHook = Callable[[VerdictConfig, bool], tuple[tuple[Step, ...], tuple[Step, ...]]]


@dataclass(frozen=True)
class Mode:
    """One optional mode."""

    switch: str
    """The setting that turns it on (``section.key``)."""
    enabled: Callable[[Config], bool]
    stages: tuple[str, ...]
    """The run stages it adds to (``run.stage_files.STAGES`` names and its own)."""
    fingerprint: str
    """Where its settings enter the run fingerprint (``run.fingerprint``): ``key`` or ``key.part``."""
    verdict: VerdictHook | None = None
    """Its steps in stage 3 for a verdict config and a wave with parts (or not): (before the
    label is read, after)."""
    own_stage: tuple[str, str] | None = None
    """A run stage of its own and the stage it runs before (None: it only hooks into others)."""


def _decompose_verdict(cfg: VerdictConfig, decomposed: bool) -> tuple[tuple[Step, ...], tuple[Step, ...]]:
    from sanctuary_local.modes.decompose import reask_parts

    return ((reask_parts,) if decomposed else ()), ()


def _citations_verdict(cfg: VerdictConfig, decomposed: bool) -> tuple[tuple[Step, ...], tuple[Step, ...]]:
    from sanctuary_local.modes.citations import annotate_citations, check_and_reask

    return ((check_and_reask,), (annotate_citations,)) if cfg.citations else ((), ())


#: The optional modes, in the order their steps run where two share a place.
MODES: dict[str, Mode] = {
    "decompose": Mode("decompose.enabled", lambda c: c.decompose.enabled, ("decompose", "retrieval", "verdict"),
                      "prompts.decompose", _decompose_verdict, own_stage=("decompose", "hyde")),
    "followup": Mode("followup.enabled", lambda c: c.followup.enabled, ("followup_questions", "followup"),
                     "prompts.followup", own_stage=("followup", "verdict")),
    "citations": Mode("verdict.citations", lambda c: c.verdict.citations, ("verdict",), "prompts.verdict",
                      _citations_verdict),
    "trust": Mode("retrieval.trust_file", lambda c: bool(c.retrieval.trust_file), ("retrieval",), "trust_file"),
}


def enabled_modes(cfg: Config) -> list[str]:
    """The modes this config turns on, in table order."""
    return [name for name, mode in MODES.items() if mode.enabled(cfg)]


def run_stages(cfg: Config, base: tuple[str, ...] = ("hyde", "retrieval", "verdict")) -> tuple[str, ...]:
    """The stages a run executes, in order: ``base`` with the enabled modes' own stages, each
    before the stage it precedes (decomposition before stage 1, the follow-up round before 3)."""
    out = list(base)
    for mode in MODES.values():
        if mode.own_stage is not None and mode.enabled(cfg):
            own, before = mode.own_stage
            out.insert(out.index(before), own)
    return tuple(out)


def verdict_steps(cfg: VerdictConfig, decomposed: bool = False) -> ModeSteps:
    """The modes' steps for stage 3: each mode's hook asked in table order (``decomposed``:
    the wave has a claim in parts)."""
    before: list[Step] = []
    after: list[Step] = []
    for mode in MODES.values():
        if mode.verdict is not None:
            b, a = mode.verdict(cfg, decomposed)
            before += b
            after += a
    return ModeSteps(tuple(before), tuple(after))
