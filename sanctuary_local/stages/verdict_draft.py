"""The record stage 3's steps pass along, one per claim, and what every step may read.

Stage 3 is a line of small steps (``stages/verdict.py``): prompt → generate → score
labels → calibrate → record, each mode a step of its own. A step maps ``list[Draft]``
to ``list[Draft]`` in the same order, filling in its fields with ``dataclasses.replace``;
no step re-parses what an earlier one wrote as text.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sanctuary_local.config import VerdictConfig
from sanctuary_local.llm.base import ChatRequest, ChatResult, LLMBackend
from sanctuary_local.records import STANCE_FEATURES, STANCES, Claim, ClaimEvidence, HydeResult  # noqa: F401

if TYPE_CHECKING:  # types only: these modules import nothing from here at run time
    from sanctuary_local.stages.calibration import Calibration
    from sanctuary_local.stages.citations import CitationOutcome

Key = tuple[int, int]  # (query position, snippet rank)


@dataclass(frozen=True, slots=True)
class Parts:
    """A decomposed claim's parts for stage 3 (``decompose.enabled``) and the prompt that lists them."""

    components: tuple[str, ...]
    prompt: str = "verdict_components.txt"
    reask_prompt: str = "verdict_parts_label.txt"
    """Asked once when the verdict does not label every part."""


@dataclass(frozen=True, slots=True)
class LabelScores:
    """The label step's outcome: raw log-probabilities of the four labels (``LABELS``
    order), the calibrated probabilities, and where the label came from."""

    logprobs: tuple[float, ...]
    probabilities: tuple[float, ...] = ()
    calibrated: bool = False
    exact: bool = True
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"logprobs": [round(x, 4) for x in self.logprobs], "probabilities": [round(x, 4) for x in self.probabilities],
                "calibrated": self.calibrated, "exact": self.exact}




@dataclass(frozen=True, slots=True)
class PassageStance:
    """One passage's judgement: which snippet, and its stance log-probabilities."""

    key: Key
    """(question position, snippet rank) of the passage's first occurrence."""
    chunk_id: str
    url: str
    logprobs: tuple[float, ...]
    """log P(answer) of ``STANCES``, as the beginning of the model's answer."""

    @property
    def probabilities(self) -> tuple[float, ...]:
        """The three answers' probabilities renormalised among themselves."""
        return tuple(_softmax(self.logprobs))

    def to_dict(self) -> dict[str, Any]:
        return {"evidence": f"{self.key[0] + 1}.{self.key[1] + 1}", "chunk_id": self.chunk_id, "url": self.url,
                "logprobs": [round(x, 4) for x in self.logprobs],
                "probabilities": [round(x, 4) for x in self.probabilities]}


@dataclass(frozen=True, slots=True)
class StanceScores:
    """A claim's judged passages, their aggregate (``STANCE_FEATURES``) and failures."""

    passages: tuple[PassageStance, ...]
    candidates: int
    """Distinct passages the claim had (only the first ``stance_passages`` are judged)."""
    errors: tuple[str, ...] = ()
    prompt_tokens: int = 0
    exact: bool = True
    """False when the backend scored only each answer's first token (``ScoreResult.exact``)."""

    @property
    def features(self) -> tuple[float, ...]:
        return stance_features([p.probabilities for p in self.passages])

    def to_dict(self) -> dict[str, Any]:
        return {"stances": list(STANCES), "features": dict(zip(STANCE_FEATURES, (round(x, 4) for x in self.features),
                                                               strict=True)),
                "passages": [p.to_dict() for p in self.passages], "candidates": self.candidates,
                "errors": list(self.errors)}


def stance_features(probabilities: Sequence[Sequence[float]], full: int = 4) -> tuple[float, ...]:
    """``STANCE_FEATURES`` of a claim from its passages' (support, refute, neither)
    probabilities; ``evidence`` = min(passages, ``full``) / ``full``. No passage: all 0."""
    if not probabilities:
        return (0.0,) * len(STANCE_FEATURES)
    s = [p[0] for p in probabilities]
    r = [p[1] for p in probabilities]
    return (sum(s) / len(s), sum(r) / len(r), max(s), max(r), min(len(probabilities), full) / full)



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
    """The generated reasoning (paper mode, or scored mode with ``reasoning_tokens``)."""
    scores: LabelScores | None = None
    label: str | None = None
    justification: str = ""
    flags: tuple[str, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)
    cited: CitationOutcome | None = None
    stance: StanceScores | None = None
    """stance mode: the passages judged one by one (``stages/stance.py``)."""
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
    """What the steps share: the backend, the stage config, the calibration (or None),
    the hash of the templates this config uses and, in trained mode, the model."""

    backend: LLMBackend | None
    """None in trained mode (no LLM)."""
    cfg: VerdictConfig
    calibration: Calibration | None = None
    prompts_hash: str = ""
    trained: Any = None
    """trained mode: the loaded model and its rule (``verdict_trained.TrainedVerdict``)."""


def _softmax(z: Sequence[float]) -> list[float]:
    m = max(z)
    e = [math.exp(x - m) if math.isfinite(x) else 0.0 for x in z]
    t = sum(e)
    return [x / t for x in e]
