"""llama.cpp backend (llama-cpp-python over a GGUF file), the embedded CPU default.

The prompt string is rendered here from the chat template — the GGUF's own
(``tokenizer.chat_template`` metadata, e.g. Qwen2.5's ChatML) unless
``LLMConfig.chat_template`` names one in ``sanctuary_local/prompts`` (the packaged Gemma 3
270M GGUF has none: ``gemma_chat.jinja``) —, tokenized once, counted, and passed to
llama.cpp as token ids, so ``count_tokens`` measures exactly what runs.

Requests run one after another on one ``Llama`` object that is never reset: llama-cpp-python
(0.3.36, ``Llama.generate``) compares the new prompt with the tokens its context holds (the
previous prompt and completion), keeps the KV cache of the longest common prefix
(``kv_cache_seq_rm`` from there on) and evaluates only the rest, so the shared instructions
+ few-shot prefix of a stage is processed once. ``ChatResult.cached_tokens`` reports that
prefix per request, computed by the same rule.

A request that names its fixed head (``ChatRequest.cache_prefix``: stage 1's instructions and
example) has that head evaluated on its own, then the rest: the head's KV cache is kept for
the next request (the previous claim's tokens are dropped, so every claim is computed the
same way) and, with ``llm.prefix_cache``, saved on disk for the next process
(``prefix_cache.py``).
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from sanctuary_local.config.settings import LLMConfig, SamplingConfig
from sanctuary_local.errors import UserError, require
from sanctuary_local.llm.base import ChatMessage, ChatRequest, ChatResult
from sanctuary_local.llm.chat_template import load_chat_template, render_chat
from sanctuary_local.llm.prefix_cache import MIN_PREFIX_TOKENS, PrefixStore, hold_head
from sanctuary_local.models.resolve import resolve_model

log = logging.getLogger(__name__)

# End-of-turn markers of the templates we render: generation also stops on them (llama.cpp
# stops on the model's end-of-generation tokens anyway; this covers text-level matches).
_TURN_ENDS = ("<end_of_turn>", "<|im_end|>")


def _gguf_file(path: Path) -> Path:
    if path.is_file():
        return path
    found = sorted(path.glob("*.gguf"))
    if len(found) != 1:
        raise UserError(f"{path}: expected exactly one .gguf file in this directory, found {len(found)}")
    return found[0]


def _usable_cores() -> int:
    """Cores this process may run on (its affinity mask: a container's share, not the host's)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def reused_prefix(context: list[int], prompt: list[int]) -> int:
    """Prompt tokens llama-cpp-python takes from the KV cache when ``prompt`` follows a
    context holding ``context`` (``Llama.generate``, 0.3.36): the longest common prefix,
    less one when it covers the whole prompt (the last token is re-evaluated for fresh
    logits). Assumes llama.cpp can cut the cache at that point (true for Qwen2's plain
    attention cache; a sliding-window or recurrent cache may refuse, and then everything
    is evaluated again)."""
    n = 0
    for a, b in zip(context, prompt):
        if a != b:
            break
        n += 1
    return n - 1 if n and n == len(prompt) else n


def completion_args(s: SamplingConfig, max_tokens: int, template_stop: list[str]) -> dict[str, Any]:
    """``create_completion``'s sampling arguments for ``s`` (every field sent explicitly)."""
    return {
        "max_tokens": max_tokens,
        "temperature": s.temperature,
        "top_p": s.top_p,
        "top_k": s.top_k if s.top_k > 0 else 0,  # llama.cpp: 0 disables top-k
        "min_p": s.min_p,
        "repeat_penalty": s.repetition_penalty,
        "seed": s.seed,
        "stop": [*template_stop, *s.stop],
    }


def chat_template_of(llm: Any, cfg: LLMConfig) -> str:
    """The chat template: the one ``cfg.chat_template`` names, else the GGUF's own."""
    if cfg.chat_template:
        return load_chat_template(cfg.chat_template)
    template = llm.metadata.get("tokenizer.chat_template")
    if not template:
        raise UserError(
            f"model '{cfg.model}' has no chat template in its GGUF metadata (tokenizer.chat_template): set llm.chat_template "
            f"to a template file in sanctuary_local/prompts (e.g. 'gemma_chat.jinja')"
        )
    return template


def token_text(llm: Any, token: int) -> str:
    """The text of one special token (BOS, EOS); ``""`` for none (a negative id)."""
    if token < 0:
        return ""
    return llm.detokenize([token], special=True).decode("utf-8", errors="replace")


def completion_result(out: dict[str, Any], n_prompt: int, t0: float, extra: dict[str, Any], cached: int) -> ChatResult:
    """``create_completion``'s answer as a ``ChatResult``; ``t0`` is when the request began."""
    choice, usage = out["choices"][0], out.get("usage") or {}
    return ChatResult(
        text=choice.get("text") or "",
        prompt_tokens=int(usage.get("prompt_tokens", n_prompt)),
        completion_tokens=int(usage.get("completion_tokens", 0)),
        finish_reason=choice.get("finish_reason") or "",
        seconds=time.perf_counter() - t0,
        extra=extra,
        cached_tokens=cached,
    )


def head_length(heads: dict[str, list[int]], tokenize: Any, req: ChatRequest, prompt: str, tokens: list[int]) -> int:
    """Tokens of ``tokens`` (``prompt``'s) that are the request's fixed head (``cache_prefix``),
    0 for none. The head's tokens are computed once per head text (cached in ``heads``)."""
    head, last = req.cache_prefix, req.messages[-1].content
    at = prompt.rfind(last) if head and last.startswith(head) else -1
    if at < 0:
        return 0
    text = prompt[: at + len(head)]
    if text not in heads:
        heads[text] = tokenize(text)
    n = reused_prefix(heads[text], tokens)
    return n if MIN_PREFIX_TOKENS <= n < len(tokens) else 0


def grammar_for(llama_cpp: Any, cache: dict[str, Any], schema: dict[str, Any]) -> Any:
    """The GBNF grammar of a JSON schema, compiled once per schema (~100 ms each)."""
    key = json.dumps(schema, sort_keys=True)
    if key not in cache:
        cache[key] = llama_cpp.LlamaGrammar.from_json_schema(key, verbose=False)
    return cache[key]


class LlamaCppBackend:
    """``LLMBackend`` over llama-cpp-python; CPU threads and context from ``LLMConfig``."""

    name = "llama_cpp"

    def __init__(self, cfg: LLMConfig, models_dir: str | Path = "models") -> None:
        llama_cpp = require("llama_cpp", "cpu", "the llama_cpp LLM backend")
        self.cfg = cfg
        path = _gguf_file(resolve_model(cfg.model, models_dir))
        self.model_id = path.name
        self._llama_cpp = llama_cpp
        self._llm = llama_cpp.Llama(model_path=str(path), n_ctx=cfg.max_model_len, n_threads=cfg.n_threads or _usable_cores(),
                                    n_batch=cfg.n_batch, seed=0, verbose=False)
        self._template = chat_template_of(self._llm, cfg)
        self._bos = token_text(self._llm, self._llm.token_bos())
        self._eos = token_text(self._llm, self._llm.token_eos())
        self._stop = [m for m in _TURN_ENDS if m in self._template]
        self._grammars: dict[str, Any] = {}
        self._heads: dict[str, list[int]] = {}  # a fixed head's text -> its tokens
        self._batch: Any = None  # the SequenceBatch of llm.parallel > 1, made on first use
        self._prefixes = PrefixStore(path, llama_cpp, cfg.max_model_len, cfg.n_batch) if cfg.prefix_cache else None

    def _tokenize(self, text: str) -> list[int]:
        # The template writes the BOS text itself: parse special tokens, add no second BOS.
        return self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)

    def _render(self, messages: tuple[ChatMessage, ...]) -> str:
        return render_chat(self._template, messages, self._bos, self._eos)

    def _prepare(self, req: ChatRequest) -> tuple[list[int], int, int] | ChatResult:
        """The request's prompt tokens, its completion cap (``max_tokens``, less if the context has
        less room) and its fixed head's length; a prompt the context cannot hold is an error result."""
        prompt = self._render(req.messages)
        tokens = self._tokenize(prompt)
        room = self.cfg.max_model_len - len(tokens)
        if room < 1:
            return ChatResult("", len(tokens), 0, "error", 0.0,
                              error=f"prompt of {len(tokens)} tokens does not fit max_model_len={self.cfg.max_model_len}")
        return tokens, min(req.sampling.max_tokens, room), head_length(self._heads, self._tokenize, req, prompt, tokens)

    def count_tokens(self, messages: tuple[ChatMessage, ...]) -> int:
        """Exact prompt length in tokens after the chat template."""
        return len(self._tokenize(self._render(messages)))

    def _grammar(self, schema: dict[str, Any]) -> Any:
        return grammar_for(self._llama_cpp, self._grammars, schema)

    def _one(self, req: ChatRequest) -> ChatResult:
        t0 = time.perf_counter()
        prep = self._prepare(req)
        if isinstance(prep, ChatResult):
            return prep
        tokens, max_tokens, head = prep
        args = completion_args(req.sampling, max_tokens, self._stop)
        if req.json_schema is not None:
            args["grammar"] = self._grammar(req.json_schema)
        if head:
            cached = hold_head(self._llm, tokens[:head], self._prefixes)
        else:
            cached = reused_prefix(self._llm._input_ids.tolist(), tokens)  # what the context holds now
        out = self._llm.create_completion(prompt=tokens, **args)
        extra = {"grammar": req.json_schema is not None, "room_capped": args["max_tokens"] < req.sampling.max_tokens}
        return completion_result(out, len(tokens), t0, extra, cached)

    def generate(self, requests: list[ChatRequest]) -> list[ChatResult]:
        """Run the requests (``llm.parallel`` > 1: several decoded together, ``llama_cpp_batch``;
        else in order); a failing request yields an error result, never raises."""
        done = self._batched(requests) if self.cfg.parallel > 1 and len(requests) > 1 else {}
        return [done[i] if i in done else self._safe_one(req) for i, req in enumerate(requests)]

    def _safe_one(self, req: ChatRequest) -> ChatResult:
        try:
            return self._one(req)
        except Exception as exc:  # one bad request must not kill the batch
            log.warning("llama_cpp request %s failed: %s", req.tag, exc)
            return ChatResult("", finish_reason="error", error=f"{type(exc).__name__}: {exc}")

    def _batched(self, requests: list[ChatRequest]) -> dict[int, ChatResult]:
        """``llama_cpp_batch.batched``'s results; a batch failing as a whole gives none (one at a time instead)."""
        from sanctuary_local.llm.llama_cpp_batch import SequenceBatch, batched

        try:
            if self._batch is None:
                self._batch = SequenceBatch(self._llama_cpp, self._llm._model.model, self.cfg.parallel,
                                            self.cfg.max_model_len, self.cfg.n_threads or _usable_cores())
            return batched(self, self._batch, requests)
        except Exception as exc:  # noqa: BLE001 - the batch failed as a whole
            log.warning("llama_cpp batch of %d failed (%s: %s); running its requests one at a time",
                        len(requests), type(exc).__name__, exc)
            return {}

    def close(self) -> None:
        """Free the model and its KV cache."""
        batch, self._batch = getattr(self, "_batch", None), None
        if batch is not None:
            batch.close()
        llm, self._llm = getattr(self, "_llm", None), None
        if llm is not None:
            llm.close()
