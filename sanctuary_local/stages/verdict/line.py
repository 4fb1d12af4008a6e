"""Stage 3 (paper §4.4, Appendix B; issue 26): the verdict, as a line of small steps.

Every step maps ``list[Draft]`` to ``list[Draft]`` in claim order (``draft``);
each mode is a step of its own, chosen once by ``line(cfg, modes)``, never a branch inside a step:

    every mode starts with: withhold flagged snippets (``verdict.guard_flagged``)
    trained (verdict.mode = "trained", no LLM): classify → justify from the evidence → record
        (a model learned from AVeriTeC train, ``trained`` and ``verdict_model/``)
    paper  (verdict.mode = "paper", the paper's path, its specification):
        prompt → generate → label re-ask → [modes' steps] → text label → [modes' steps] → record

The optional modes borrowed from other systems (``modes/``: the parts re-ask of claim
decomposition, the citation check and re-ask) hand their steps in as ``ModeSteps``
(``modes.verdict_steps``); stage 3 runs them where they go and imports no mode.

The LLM modes that scored the four labels ("scored") or each passage's stance ("stance")
were retired: on held-out claims both labelled worse than always answering Refuted
(docs/verdicts.md, "Retired modes").

- guard: ``prompt.guard_flagged`` — snippets whose text looks like an instruction
  to the model are redacted (or left out) in every prompt's copy (issue 27);
- prompt: ``prompt.build_prompts`` — fenced, neutralised, deduplicated evidence
  (``evidence_view``) fitted to the context;
- generate, label re-ask, text label: ``paper`` (a claim in parts: ``parts``);
- classify, justify: ``trained``; record: ``record``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sanctuary_local.config.settings import VerdictConfig
from sanctuary_local.llm.base import LLMBackend
from sanctuary_local.records import Claim, ClaimEvidence, HydeResult, Prediction
from sanctuary_local.stages.verdict.draft import Context, Draft, Parts
from sanctuary_local.stages.verdict.paper import generate, reask_label, text_label
from sanctuary_local.stages.verdict.prompt import build_prompts, guard_flagged
from sanctuary_local.stages.verdict.prompt_hash import config_prompt_hash
from sanctuary_local.stages.verdict.record import record
from sanctuary_local.stages.verdict.trained import TrainedVerdict, classify, justify

__all__ = ["ModeSteps", "Step", "line", "run_verdict"]

Step = Callable[[list[Draft], Context], list[Draft]]


@dataclass(frozen=True)
class ModeSteps:
    """The steps the enabled optional modes add to the paper path (``modes.verdict_steps``)."""

    before_label: tuple[Step, ...] = ()
    """Run after the label re-ask, before the label is read from the text."""
    after_label: tuple[Step, ...] = ()
    """Run after the label is read."""


#: No optional mode: the paper path alone.
NO_MODES = ModeSteps()


def line(cfg: VerdictConfig, modes: ModeSteps = NO_MODES) -> tuple[Step, ...]:
    """The steps of stage 3 for this config and these modes' steps, in order (``record``
    follows them). Trained mode takes no mode's step."""
    if cfg.mode == "trained":
        return (guard_flagged, classify, justify)
    steps: list[Step] = [guard_flagged, build_prompts, generate]
    if cfg.label_reask:
        steps.append(reask_label)
    return (*steps, *modes.before_label, text_label, *modes.after_label)


def run_verdict(
    claims: Sequence[Claim],
    hyde: Sequence[HydeResult],
    evidence: Sequence[ClaimEvidence],
    backend: LLMBackend | None,
    cfg: VerdictConfig,
    parts: Sequence[Parts | None] | None = None,
    trained: TrainedVerdict | None = None,
    modes: ModeSteps = NO_MODES,
) -> list[Prediction]:
    """Stage 3 for a wave of claims; predictions in claim order. ``parts``
    (``decompose.enabled``): per claim its parts, or None to verify it whole.
    ``trained``: the loaded model of trained mode (``backend`` is then None).
    ``modes``: the optional modes' steps (``modes.verdict_steps``)."""
    if cfg.mode == "trained" and trained is None:
        raise ValueError("run_verdict: trained mode needs the loaded model (trained.load_trained)")
    if cfg.mode != "trained" and backend is None:
        raise ValueError(f"run_verdict: mode {cfg.mode!r} needs an LLM backend")
    if not (len(claims) == len(hyde) == len(evidence)):
        raise ValueError(f"run_verdict: {len(claims)} claims, {len(hyde)} hyde results, {len(evidence)} evidence records")
    for c, h, e in zip(claims, hyde, evidence, strict=True):
        if not (c.index == h.claim_index == e.claim_index):
            raise ValueError(f"run_verdict: records out of order at claim {c.index} (hyde {h.claim_index}, evidence {e.claim_index})")
    parts = list(parts) if parts is not None else [None] * len(claims)
    drafts = [Draft(c, h, e, pt) for c, h, e, pt in zip(claims, hyde, evidence, parts, strict=True)]
    ctx = Context(backend, cfg, config_prompt_hash(cfg), trained)
    for step in line(cfg, modes):
        drafts = step(drafts, ctx)
    return record(drafts, ctx)
