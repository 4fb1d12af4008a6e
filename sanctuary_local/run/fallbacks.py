"""The record a claim gets when its model call fails for good (after ``waves.resilient``
split its wave down to the claim alone): the run goes on, the claim is flagged."""

from __future__ import annotations

import dataclasses

from sanctuary_local.config.settings import Config
from sanctuary_local.records import Claim, ClaimEvidence, Decomposition, HydeResult, Prediction

__all__ = ["decompose_fallback", "followup_fallback", "hyde_fallback", "verdict_fallback"]


def _error(kind: str, exc: Exception) -> str:
    return f"{kind}: {type(exc).__name__}: {exc}"[:300]


def decompose_fallback(claim: Claim, exc: Exception) -> Decomposition:
    return Decomposition(claim.index, (claim.text.strip(),), None, (), "", "",
                         (_error("decompose_llm_error", exc), "decompose_fallback"))


def followup_fallback(claim: Claim, exc: Exception) -> HydeResult:
    return HydeResult(claim.index, None, (), "", (_error("followup_llm_error", exc), "followup_unusable"))


def hyde_fallback(claim: Claim, cfg: Config, exc: Exception) -> HydeResult:
    from sanctuary_local.stages.hyde import parse_hyde

    r = parse_hyde("", claim, cfg.hyde)
    return dataclasses.replace(r, flags=(*r.flags, _error("hyde_llm_error", exc)))


def verdict_fallback(claim: Claim, hyde: HydeResult, ev: ClaimEvidence, exc: Exception) -> Prediction:
    from sanctuary_local.stages.evidence_view import official_evidence
    from sanctuary_local.stages.verdict.parsing import parse_verdict_output as parse_verdict

    label, justification, flags = parse_verdict("", hyde.provisional_label)
    evidence, evidence_all, eflags = official_evidence(claim, ev)
    return Prediction(
        claim_index=claim.index, claim_id=claim.claim_id, claim=claim.text, label=label,
        evidence=evidence, justification=justification, provisional_label=hyde.provisional_label,
        flags=(*eflags, *flags, _error("verdict_llm_error", exc)), evidence_all=evidence_all,
    )
