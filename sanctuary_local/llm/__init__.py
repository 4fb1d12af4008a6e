"""LLM backends behind one protocol (``base.LLMBackend``), chosen by name.

``BACKENDS`` maps a config name to its class; each backend module is imported only when
its class is looked up, and the heavy engine (vllm, llama_cpp) only when a backend is
constructed, so ``import sanctuary_local.llm`` stays light on every machine. The one table
behind it, ``_TABLE``, also names the package each backend's engine comes from and the extra
that installs it: ``engine`` reads it for the run's pre-flight check and for ``doctor``.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import NamedTuple

from sanctuary_local.config.settings import LLMConfig
from sanctuary_local.errors import UserError
from sanctuary_local.llm.base import ChatMessage, ChatRequest, ChatResult, LLMBackend

__all__ = ["BACKENDS", "ChatMessage", "ChatRequest", "ChatResult", "Engine", "LLMBackend", "engine", "make_backend"]


class _Backend(NamedTuple):
    module: str  #: our module that defines the class
    cls: str  #: the class, an ``LLMBackend``
    package: str | None  #: the Python package its engine imports (None: the standard library only)
    extra: str | None  #: the ``pip install 'sanctuary-local[EXTRA]'`` that brings that package


#: The one backend table: name (``LLMConfig.backend``) → where its class is and what it needs.
_TABLE: dict[str, _Backend] = {
    "vllm": _Backend("sanctuary_local.llm.vllm_backend", "VLLMBackend", "vllm", "gpu"),
    "llama_cpp": _Backend("sanctuary_local.llm.llama_cpp_backend", "LlamaCppBackend", "llama_cpp", "cpu"),
    "openai_http": _Backend("sanctuary_local.llm.openai_http", "OpenAIHTTPBackend", None, None),
}


class Engine(NamedTuple):
    """What a backend needs installed: its engine's Python package and the extra that brings it."""

    package: str | None
    extra: str | None


class _LazyClasses(Mapping[str, type]):
    """name → backend class; the module is imported on first lookup."""

    def __getitem__(self, name: str) -> type:
        entry = _TABLE[name]
        return getattr(importlib.import_module(entry.module), entry.cls)

    def __iter__(self) -> Iterator[str]:
        return iter(_TABLE)

    def __len__(self) -> int:
        return len(_TABLE)


#: Backend name (``LLMConfig.backend``) → class.
BACKENDS: Mapping[str, type] = _LazyClasses()


def engine(name: str) -> Engine:
    """The package backend ``name`` imports and its extra (``KeyError`` for an unknown name:
    callers check ``name in BACKENDS`` first and list the valid ones)."""
    entry = _TABLE[name]
    return Engine(entry.package, entry.extra)


def make_backend(cfg: LLMConfig, models_dir: str | Path = "models") -> LLMBackend:
    """Build the backend named by ``cfg.backend``; an unknown name lists the valid ones."""
    if cfg.backend not in _TABLE:
        raise UserError(f"unknown LLM backend '{cfg.backend}' (valid: {', '.join(sorted(_TABLE))})")
    return BACKENDS[cfg.backend](cfg, models_dir)
