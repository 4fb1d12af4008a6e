"""llama.cpp backend (llama-cpp-python over a GGUF file), the embedded CPU default.

The prompt string is rendered here from the chat template (the packaged Gemma 3 270M
GGUF has none in its metadata: ``LLMConfig.chat_template`` names one in
``sanctuary_local/prompts``), tokenized once, counted, and passed to llama.cpp as token
ids, so ``count_tokens`` measures exactly what runs. Requests run one after another:
llama-cpp-python has no multi-sequence batching, but it keeps the KV cache of the
previous prompt and re-evaluates only the tokens after the longest common prefix, so the
shared instructions + few-shot prefix of a stage is processed once per batch.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from sanctuary_local.config import LLMConfig, SamplingConfig
from sanctuary_local.errors import UserError, require
from sanctuary_local.llm.base import ChatMessage, ChatRequest, ChatResult
from sanctuary_local.llm.chat_template import load_chat_template, render_chat
from sanctuary_local.models import resolve_model

log = logging.getLogger(__name__)


def _gguf_file(path: Path) -> Path:
    if path.is_file():
        return path
    found = sorted(path.glob("*.gguf"))
    if len(found) != 1:
        raise UserError(f"{path}: expected exactly one .gguf file in this directory, found {len(found)}")
    return found[0]


class LlamaCppBackend:
    """``LLMBackend`` over llama-cpp-python; CPU threads and context from ``LLMConfig``."""

    name = "llama_cpp"

    def __init__(self, cfg: LLMConfig, models_dir: str | Path = "models") -> None:
        llama_cpp = require("llama_cpp", "cpu", "the llama_cpp LLM backend")
        self.cfg = cfg
        path = _gguf_file(resolve_model(cfg.model, models_dir))
        self.model_id = path.name
        self._llama_cpp = llama_cpp
        self._llm = llama_cpp.Llama(
            model_path=str(path),
            n_ctx=cfg.max_model_len,
            n_threads=cfg.n_threads or os.cpu_count() or 1,
            n_batch=cfg.n_batch,
            seed=0,
            verbose=False,
        )
        self._template = self._chat_template(cfg)
        self._bos = self._token_text(self._llm.token_bos())
        self._eos = self._token_text(self._llm.token_eos())
        # Stop at the template's end-of-turn marker as well as the model's EOG tokens.
        self._stop = ["<end_of_turn>"] if "<end_of_turn>" in self._template else []
        self._grammars: dict[str, Any] = {}

    def _chat_template(self, cfg: LLMConfig) -> str:
        if cfg.chat_template:
            return load_chat_template(cfg.chat_template)
        template = self._llm.metadata.get("tokenizer.chat_template")
        if not template:
            raise UserError(
                f"model '{cfg.model}' has no chat template in its GGUF metadata: set llm.chat_template "
                f"to a template file in sanctuary_local/prompts (e.g. 'gemma_chat.jinja')"
            )
        return template

    def _token_text(self, token: int) -> str:
        if token < 0:
            return ""
        return self._llm.detokenize([token], special=True).decode("utf-8", errors="replace")

    def _tokens(self, messages: tuple[ChatMessage, ...]) -> list[int]:
        prompt = render_chat(self._template, messages, self._bos, self._eos)
        # The template writes the BOS text itself: parse special tokens, add no second BOS.
        return self._llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)

    def count_tokens(self, messages: tuple[ChatMessage, ...]) -> int:
        """Exact prompt length in tokens after the chat template."""
        return len(self._tokens(messages))

    def _grammar(self, schema: dict[str, Any]) -> Any:
        key = json.dumps(schema, sort_keys=True)
        if key not in self._grammars:  # compiling a grammar costs ~100 ms: once per schema
            self._grammars[key] = self._llama_cpp.LlamaGrammar.from_json_schema(key, verbose=False)
        return self._grammars[key]

    def _completion_args(self, s: SamplingConfig, max_tokens: int) -> dict[str, Any]:
        return {
            "max_tokens": max_tokens,
            "temperature": s.temperature,
            "top_p": s.top_p,
            "top_k": s.top_k if s.top_k > 0 else 0,  # llama.cpp: 0 disables top-k
            "min_p": s.min_p,
            "seed": s.seed,
            "stop": self._stop,
        }

    def _one(self, req: ChatRequest) -> ChatResult:
        t0 = time.perf_counter()
        tokens = self._tokens(req.messages)
        room = self.cfg.max_model_len - len(tokens)
        if room < 1:
            return ChatResult("", len(tokens), 0, "error", time.perf_counter() - t0,
                              error=f"prompt of {len(tokens)} tokens does not fit max_model_len={self.cfg.max_model_len}")
        args = self._completion_args(req.sampling, min(req.sampling.max_tokens, room))
        if req.json_schema is not None:
            args["grammar"] = self._grammar(req.json_schema)
        out = self._llm.create_completion(prompt=tokens, **args)
        choice, usage = out["choices"][0], out.get("usage") or {}
        return ChatResult(
            text=choice.get("text") or "",
            prompt_tokens=int(usage.get("prompt_tokens", len(tokens))),
            completion_tokens=int(usage.get("completion_tokens", 0)),
            finish_reason=choice.get("finish_reason") or "",
            seconds=time.perf_counter() - t0,
            extra={"grammar": req.json_schema is not None, "room_capped": args["max_tokens"] < req.sampling.max_tokens},
        )

    def generate(self, requests: list[ChatRequest]) -> list[ChatResult]:
        """Run the requests in order; a failing request yields an error result, never raises."""
        results = []
        for req in requests:
            try:
                results.append(self._one(req))
            except Exception as exc:  # one bad request must not kill the batch
                log.warning("llama_cpp request %s failed: %s", req.tag, exc)
                results.append(ChatResult("", finish_reason="error", error=f"{type(exc).__name__}: {exc}"))
        return results

    def close(self) -> None:
        """Free the model and its KV cache."""
        llm, self._llm = getattr(self, "_llm", None), None
        if llm is not None:
            llm.close()
