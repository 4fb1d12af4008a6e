"""Stage 3's prompt identity: the hash of the templates a verdict config uses.

Recorded in every prediction (``meta.verdict_prompt_hash``) and the run manifest; a module
of its own so that readers of it need not import the prompt builder."""

from __future__ import annotations

import hashlib

from sanctuary_local.config.settings import VerdictConfig
from sanctuary_local.prompts import prompt_hash

__all__ = ["config_prompt_hash", "verdict_prompt_hash"]


def verdict_prompt_hash(prompt: str = "verdict.txt", label_reask: str = "verdict_label.txt", *more: str) -> str:
    """Hash of stage-3 templates (recorded in predictions)."""
    return prompt_hash(*(n for n in (prompt, label_reask, *more) if n))


def config_prompt_hash(cfg: VerdictConfig) -> str:
    """Hash of the templates ``cfg`` uses: the defaults give ``verdict_prompt_hash()``; with
    ``citations`` on, the cited prompt and the citation re-ask (no label re-ask: ``""``);
    in trained mode the model's name and its rule."""
    if cfg.mode == "trained":  # no template: the model (its files are in the run's fingerprint) and its rule
        return hashlib.sha256(f"trained\0{cfg.trained_model}\0rule={cfg.trained_rule}".encode()).hexdigest()[:16]
    if cfg.citations:
        return verdict_prompt_hash(cfg.citations_prompt, cfg.label_reask, cfg.citations_reask)
    return verdict_prompt_hash(cfg.prompt, cfg.label_reask)

