"""LLM backends behind one protocol (``base.LLMBackend``), chosen by name.

``BACKENDS`` maps a config name to its class; each backend module is imported only when
its class is looked up, and the heavy engine (vllm, llama_cpp) only when a backend is
constructed, so ``import sanctuary_local.llm`` stays light on every machine.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from pathlib import Path

from sanctuary_local.config.settings import LLMConfig
from sanctuary_local.errors import UserError
from sanctuary_local.llm.base import ChatMessage, ChatRequest, ChatResult, LLMBackend

__all__ = ["BACKENDS", "ChatMessage", "ChatRequest", "ChatResult", "LLMBackend", "make_backend"]

_TABLE: dict[str, tuple[str, str]] = {
    "vllm": ("sanctuary_local.llm.vllm_backend", "VLLMBackend"),
    "llama_cpp": ("sanctuary_local.llm.llama_cpp_backend", "LlamaCppBackend"),
    "openai_http": ("sanctuary_local.llm.openai_http", "OpenAIHTTPBackend"),
}


class _LazyClasses(Mapping[str, type]):
    """name → backend class; the module is imported on first lookup."""

    def __getitem__(self, name: str) -> type:
        module, cls = _TABLE[name]
        return getattr(importlib.import_module(module), cls)

    def __iter__(self) -> Iterator[str]:
        return iter(_TABLE)

    def __len__(self) -> int:
        return len(_TABLE)


#: Backend name (``LLMConfig.backend``) → class.
BACKENDS: Mapping[str, type] = _LazyClasses()


def make_backend(cfg: LLMConfig, models_dir: str | Path = "models") -> LLMBackend:
    """Build the backend named by ``cfg.backend``; an unknown name lists the valid ones."""
    if cfg.backend not in _TABLE:
        raise UserError(f"unknown LLM backend '{cfg.backend}' (valid: {', '.join(sorted(_TABLE))})")
    return BACKENDS[cfg.backend](cfg, models_dir)
