"""The record stage 3's steps pass along, one per claim, and what every step may read.

Stage 3 is a line of small steps (``stages/verdict/line.py``): prompt → generate → label →
record (paper), or classify → justify → record (trained), each mode a step of its own. A
step maps ``list[Draft]`` to ``list[Draft]`` in the same order, filling in its fields with
``dataclasses.replace``; no step re-parses what an earlier one wrote as text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sanctuary_local.config.settings import VerdictConfig
from sanctuary_local.llm.base import ChatRequest, ChatResult, LLMBackend
from sanctuary_local.records import Claim, ClaimEvidence, HydeResult

Key = tuple[int, int]  # (query position, snippet rank)


@dataclass(frozen=True, slots=True)
class Parts:
    """A decomposed claim's parts for stage 3 (``decompose.enabled``) and the prompt that lists them."""

    components: tuple[str, ...]
    prompt: str = "verdict_components.txt"
    reask_prompt: str = "verdict_parts_label.txt"
    """Asked once when the verdict does not label every part."""


#: Decimal places a record keeps of each label score (``LabelScores.to_dict``); what is printed
#: is formatted from that kept value, so console, report and justification agree.
KEPT_PLACES = 4


@dataclass(frozen=True, slots=True)
class LabelScores:
    """A label model's outcome (trained mode): log-probabilities of the four labels
    (``LABELS`` order), their probabilities, and whether a fitted decision rule chose
    the label (``calibrated``)."""

    logprobs: tuple[float, ...]
    probabilities: tuple[float, ...] = ()
    calibrated: bool = False
    exact: bool = True
    """Kept in the record for its readers (always True: every label's probability is exact)."""
    seconds: float = 0.0
    confident: bool | None = None
    """The label's probability reaches the model's fitted confidence threshold (None: no rule)."""
    threshold: float | None = None
    runner_up: str | None = None
    """The most likely label after the chosen one (shown beside an uncertain label)."""

    def to_dict(self) -> dict[str, Any]:
        out = {"logprobs": [round(x, KEPT_PLACES) for x in self.logprobs],
               "probabilities": [round(x, KEPT_PLACES) for x in self.probabilities],
               "calibrated": self.calibrated, "exact": self.exact}
        if self.runner_up is not None:
            out |= {"confident": self.confident, "confidence_threshold": self.threshold, "runner_up": self.runner_up}
        return out


@dataclass(frozen=True, slots=True)
class Draft:
    """One claim on its way through stage 3."""

    claim: Claim
    hyde: HydeResult
    evidence: ClaimEvidence
    parts: Parts | None = None
    request: ChatRequest | None = None
    """The verdict prompt; None when it could not be built (``notes`` says why)."""
    dropped: frozenset[Key] = frozenset()
    """Snippets trimmed from the prompt to fit the context."""
    shown: ClaimEvidence | None = None
    """The evidence as the model is shown it, where ``verdict.flagged`` changed it
    (``evidence_view.guarded``); None: ``evidence`` itself. Never stored."""
    withheld: frozenset[Key] = frozenset()
    """Snippets flagged as instruction-like that no prompt shows (``verdict.flagged = "withhold"``)."""
    notes: tuple[str, ...] = ()
    result: ChatResult | None = None
    """The generated reasoning (paper mode)."""
    scores: LabelScores | None = None
    """trained mode: the labels' probabilities (``trained.classify``)."""
    label: str | None = None
    justification: str = ""
    flags: tuple[str, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)
    cited: Any = None
    """The citation mode's check of this verdict (``modes.citations.CitationOutcome``), set by
    that mode's step; stage 3 itself never reads it."""
    seconds: float = 0.0
    """Model time spent on this claim by every step so far."""

    @property
    def view(self) -> ClaimEvidence:
        """What the model may read of the evidence (``shown``, else ``evidence``)."""
        return self.evidence if self.shown is None else self.shown

    def with_flags(self, *flags: str) -> Draft:
        from dataclasses import replace

        return replace(self, flags=(*self.flags, *flags))


@dataclass(frozen=True, slots=True)
class Context:
    """What the steps share: the backend, the stage config, the hash of the templates
    this config uses and, in trained mode, the model."""

    backend: LLMBackend | None
    """None in trained mode (no LLM)."""
    cfg: VerdictConfig
    prompts_hash: str = ""
    trained: Any = None
    """trained mode: the loaded model and its rule (``trained.TrainedVerdict``)."""

