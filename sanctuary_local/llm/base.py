"""The one LLM backend protocol. Batch-first: requests in, results out, same order.

Backends: ``vllm`` (offline engine, GPU), ``llama_cpp`` (GGUF on CPU), ``openai_http``
(any OpenAI-compatible server). Each lives in its own module and is chosen by name
from config through ``sanctuary_local.llm.make_backend``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from sanctuary_local.config.settings import SamplingConfig


@dataclass(frozen=True, slots=True)
class ChatMessage:
    role: str  # "system" | "user" | "assistant"
    content: str


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """One chat completion to run.

    ``json_schema``: when set and the backend supports it, output is constrained to
    that JSON schema (vLLM structured outputs, llama.cpp grammar, server
    ``response_format``); otherwise it is ignored and the caller parses tolerantly."""

    messages: tuple[ChatMessage, ...]
    sampling: SamplingConfig
    json_schema: dict[str, Any] | None = None
    tag: str = ""  # free text for logs, e.g. "hyde:12"
    cache_prefix: str = ""
    """The leading text of the last message that every request of the stage shares (its
    template before the first placeholder). llama.cpp evaluates it apart and keeps its KV
    cache, in memory and (``llm.prefix_cache``) on disk; other backends ignore it (vLLM
    and the servers cache prefixes themselves)."""


@dataclass(frozen=True, slots=True)
class ChatResult:
    """The outcome of one request. ``error`` is set (and ``text`` empty) when the request
    failed; a failed request never raises out of ``generate``."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = ""  # "stop" | "length" | "error" | ...
    seconds: float = 0.0
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    cached_tokens: int = 0
    """Prompt tokens whose KV cache was reused from earlier requests (prefix caching);
    0 when none were or the backend cannot tell."""

    @property
    def ok(self) -> bool:
        return self.error is None


@runtime_checkable
class LLMBackend(Protocol):
    """What every backend implements."""

    name: str
    model_id: str

    def generate(self, requests: list[ChatRequest]) -> list[ChatResult]:
        """Run all requests (batched as the backend sees fit); results in input order."""
        ...

    def count_tokens(self, messages: tuple[ChatMessage, ...]) -> int:
        """Prompt tokens these messages take after the chat template is applied."""
        ...

    def close(self) -> None:
        """Release the model (GPU memory, threads); the backend is unusable afterwards."""
        ...
