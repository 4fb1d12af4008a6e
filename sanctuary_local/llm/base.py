"""The one LLM backend protocol. Batch-first: requests in, results out, same order.

Backends: ``vllm`` (offline engine, GPU), ``llama_cpp`` (GGUF on CPU), ``openai_http``
(any OpenAI-compatible server). Each lives in its own module and is chosen by name
from config through ``sanctuary_local.llm.make_backend``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from sanctuary_local.config import SamplingConfig


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


@dataclass(frozen=True, slots=True)
class ScoreRequest:
    """Score fixed continuations of a conversation instead of sampling one.

    The backend renders ``messages`` with the chat template and the generation prompt
    (the assistant's turn is about to begin) and returns, for every candidate, the sum of
    the log-probabilities of its tokens as the beginning of the assistant's answer:
    ``log P(candidate | prompt)``. Used to pick a label by score, not by parsing text."""

    messages: tuple[ChatMessage, ...]
    candidates: tuple[str, ...]
    tag: str = ""


@dataclass(frozen=True, slots=True)
class ScoreResult:
    """Log-probabilities of one ``ScoreRequest``'s candidates, in candidate order.

    ``exact`` is True when every token of every candidate was scored; False when the
    backend could only score each candidate's first token (an OpenAI-compatible server's
    ``top_logprobs``): a candidate whose first token is not among them gets ``-inf``.
    ``error`` is set (and ``logprobs`` empty) when the request failed."""

    logprobs: tuple[float, ...] = ()
    prompt_tokens: int = 0
    seconds: float = 0.0
    exact: bool = True
    error: str | None = None

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

    def score(self, requests: list[ScoreRequest]) -> list[ScoreResult]:
        """Log-probabilities of each request's candidates (see ``ScoreRequest``); results in
        input order, a failed request gives an error result, never raises. A backend that
        cannot return log-probabilities answers every request with an error result; the
        caller then falls back to parsing generated text."""
        ...

    def close(self) -> None:
        """Release the model (GPU memory, threads); the backend is unusable afterwards."""
        ...
