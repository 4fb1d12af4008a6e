"""Stage 3's prompt identity: the hash of the templates a verdict config uses.

Recorded in every prediction (``meta.verdict_prompt_hash``) and the run manifest, and the
key a label calibration is checked against (``stages/calibration.py``), which is why it is a
module of its own: the calibration reads it without importing the prompt builder."""

from __future__ import annotations

import hashlib

from sanctuary_local.config import NEUTRAL_DEFAULTS, VerdictConfig
from sanctuary_local.prompts import prompt_hash

__all__ = ["config_prompt_hash", "stance_prompt_hash", "verdict_prompt_hash"]


def verdict_prompt_hash(prompt: str = "verdict.txt", label_reask: str = "verdict_label.txt", *more: str) -> str:
    """Hash of stage-3 templates (recorded in predictions; keys calibrations)."""
    return prompt_hash(*(n for n in (prompt, label_reask, *more) if n))


def config_prompt_hash(cfg: VerdictConfig) -> str:
    """Hash of the templates ``cfg`` uses: the defaults give ``verdict_prompt_hash()``; with
    ``citations`` on, the cited prompt and the citation re-ask (no label re-ask: ``""``);
    in scored mode the scored prompt, or the reasoning prompt and the label question; in
    stance mode the stance prompt and its settings."""
    if cfg.mode == "stance":
        return stance_prompt_hash(cfg)
    if cfg.mode == "trained":  # no template: the model (its files are in the run's fingerprint) and its rule
        return hashlib.sha256(f"trained\0{cfg.trained_model}\0rule={cfg.trained_rule}".encode()).hexdigest()[:16]
    if cfg.mode == "scored":
        if cfg.reasoning_tokens:  # the reasoning's cap (and penalty) change the scores too: hashed with the templates
            templates = verdict_prompt_hash(cfg.prompt, cfg.scored_label_prompt)
            penalty = cfg.sampling.repetition_penalty
            extra = "" if penalty == NEUTRAL_DEFAULTS["repetition_penalty"] else f"\0repetition_penalty={penalty}"
            return hashlib.sha256(f"{templates}\0reasoning_tokens={cfg.reasoning_tokens}{extra}".encode()).hexdigest()[:16]
        return verdict_prompt_hash(cfg.scored_prompt, "")
    if cfg.citations:
        return verdict_prompt_hash(cfg.citations_prompt, cfg.label_reask, cfg.citations_reask)
    return verdict_prompt_hash(cfg.prompt, cfg.label_reask)


def stance_prompt_hash(cfg: VerdictConfig) -> str:
    """Hash of the stance template and the settings that change what the model sees."""
    base = prompt_hash(cfg.stance_prompt)
    return hashlib.sha256(f"{base}\0passages={cfg.stance_passages}\0words={cfg.stance_words}".encode()).hexdigest()[:16]
