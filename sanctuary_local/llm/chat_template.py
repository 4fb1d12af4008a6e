"""Render chat messages through a Jinja chat template (HF / GGUF conventions).

Used by backends that build the prompt string themselves (llama.cpp) so that the prompt
that is counted is exactly the prompt that is run. Templates are sandboxed as in
``transformers`` (``ImmutableSandboxedEnvironment``)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from sanctuary_local.llm.base import ChatMessage
from sanctuary_local.prompts import load_prompt


def _raise(message: str) -> None:
    raise ValueError(f"chat template error: {message}")


@lru_cache(maxsize=8)
def _compile(template: str) -> Any:
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = _raise
    return env.from_string(template)


def load_chat_template(name: str) -> str:
    """A chat template shipped in ``sanctuary_local/prompts`` (e.g. ``gemma_chat.jinja``)."""
    return load_prompt(name)


def render_chat(
    template: str,
    messages: tuple[ChatMessage, ...] | list[ChatMessage],
    bos_token: str = "",
    eos_token: str = "",
    add_generation_prompt: bool = True,
) -> str:
    """The prompt string for ``messages``, ending with the assistant turn opener."""
    return _compile(template).render(
        messages=[{"role": m.role, "content": m.content} for m in messages],
        bos_token=bos_token,
        eos_token=eos_token,
        add_generation_prompt=add_generation_prompt,
    )
