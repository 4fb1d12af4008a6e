"""Several requests decoded together in one llama.cpp batch (``llm.parallel`` > 1).

One decode step reads the model's weights once for every sequence in the batch, so on a
machine where one sequence is held back by memory bandwidth, N sequences cost less than N
steps. This module holds a second llama.cpp context beside the ``Llama`` object's own (same
model weights, no copy) with ``parallel`` sequence slots and a unified KV cache:

- sequence 0 holds the stage's fixed head (``ChatRequest.cache_prefix``: instructions and
  example), evaluated once per head and copied into each slot (``llama_memory_seq_cp``: the
  cells are shared, not duplicated);
- continuous batching: a slot freed by a finished request takes the next one at once; a
  request is admitted only while the context has room for its prompt and its ``max_tokens``;
- each slot samples with its own sampler chain (llama.cpp's ``llama_sampler``: the repeat
  penalty, the JSON-schema grammar when the request has one, then greedy or
  top-k/top-p/min-p/temperature with the request's seed), from its own row of logits;
- a request ends at an end-of-generation token, at one of its stop strings (cut there, as
  ``create_completion`` does) or at ``max_tokens``.

Greedy text equals the one-at-a-time path's except where two tokens' logits are within
float rounding (batched matrix products sum in another order): the throughput benchmark
counts the claims whose text differs. Issue 69; ``benchmarks/speed/throughput.py``.
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass, field
from typing import Any

from sanctuary_local.config.llm import SamplingConfig

#: Tokens per ``llama_decode`` call (the context's ``n_batch``).
CHUNK = 512
#: The repeat penalty's window, llama-cpp-python's ``last_n_tokens_size`` default.
PENALTY_LAST_N = 64


@dataclass(slots=True)
class Job:
    """One request to decode: its prompt's tokens (the head first), its sampling and limits."""

    tokens: list[int]
    head: int  #: leading tokens equal to the batch's head (taken from sequence 0's cache)
    sampling: SamplingConfig
    max_tokens: int
    stop: tuple[str, ...]
    grammar: Any = None  #: a ``LlamaGrammar`` or None


@dataclass(slots=True)
class Done:
    """A finished job: its text, completion tokens, why it ended and when (seconds since the batch began)."""

    text: str
    completion_tokens: int
    finish_reason: str
    seconds: float


@dataclass(slots=True)
class _Slot:
    job: int
    pos: int
    chain: Any
    out: list[int] = field(default_factory=list)
    pieces: bytearray = field(default_factory=bytearray)
    last: int | None = None


class SequenceBatch:
    """A llama.cpp context with ``parallel`` sequence slots over an already loaded model."""

    def __init__(self, llama_cpp: Any, model: Any, parallel: int, n_ctx: int, threads: int) -> None:
        self.lib, self.parallel, self.n_ctx = llama_cpp, parallel, n_ctx
        p = llama_cpp.llama_context_default_params()
        p.n_ctx, p.n_batch, p.n_ubatch, p.n_seq_max = n_ctx, CHUNK, CHUNK, parallel + 1
        p.n_threads = p.n_threads_batch = threads
        p.kv_unified = True
        self.ctx = llama_cpp.llama_init_from_model(model, p)
        if not self.ctx:
            raise RuntimeError(f"llama.cpp could not create a context of {n_ctx} tokens for {parallel} sequences")
        self.mem = llama_cpp.llama_get_memory(self.ctx)
        self.vocab = llama_cpp.llama_model_get_vocab(model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)
        self.batch = llama_cpp.llama_batch_init(CHUNK, 0, 1)
        self.head: list[int] = []
        self.steps = 0  #: decode calls so far (each reads the weights once)

    def close(self) -> None:
        if self.ctx:
            self.lib.llama_batch_free(self.batch)
            self.lib.llama_free(self.ctx)
            self.ctx = None

    # -- the head --------------------------------------------------------------------------
    def _hold_head(self, head: list[int]) -> None:
        """Sequence 0 holds ``head`` (evaluated only when it differs from the one held)."""
        if head == self.head:
            return
        self.lib.llama_memory_clear(self.mem, True)
        self.head = []
        if head:
            self._decode([(t, i, 0, False) for i, t in enumerate(head)], {})
        self.head = list(head)

    # -- decoding --------------------------------------------------------------------------
    def _decode(self, items: list[tuple[int, int, int, bool]], slots: dict[int, _Slot]) -> dict[int, int]:
        """Evaluate (token, position, sequence, wants logits) items in chunks; a sequence that
        wants logits gets its next token sampled by its slot's chain (which accepts it)."""
        out, b = {}, self.batch
        for s in range(0, len(items), CHUNK):
            chunk = items[s : s + CHUNK]
            for i, (t, pos, seq, lg) in enumerate(chunk):
                b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = t, pos, 1, lg
                b.seq_id[i][0] = seq
            b.n_tokens = len(chunk)
            rc = self.lib.llama_decode(self.ctx, b)
            if rc != 0:
                raise RuntimeError(f"llama_decode returned {rc} (a full KV cache or an interrupted batch)")
            self.steps += 1
            for i, (_, _, seq, lg) in enumerate(chunk):
                if lg:
                    out[seq] = int(self.lib.llama_sampler_sample(slots[seq].chain, self.ctx, i))
        return out

    def _chain(self, job: Job) -> Any:
        lib, s = self.lib, job.sampling
        chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
        if s.repetition_penalty != 1.0:
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_penalties(PENALTY_LAST_N, s.repetition_penalty, 0.0, 0.0))
        if job.grammar is not None:
            g = job.grammar
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_grammar(self.vocab, g._grammar.encode(), g._root.encode()))
        if s.temperature <= 0.0:
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_greedy())
        else:
            if s.top_k > 0:
                lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_top_k(s.top_k))
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_top_p(s.top_p, 1))
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_min_p(s.min_p, 1))
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_temp(s.temperature))
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_dist(s.seed & 0xFFFFFFFF))
        return chain

    def _piece(self, token: int) -> bytes:
        buf = (ctypes.c_char * 256)()
        n = self.lib.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, False)
        return bytes(buf[: max(0, n)])

    def _reserve(self, job: Job) -> int:
        return len(job.tokens) - job.head + job.max_tokens

    def fits(self, job: Job) -> bool:
        """Whether ``job`` can run alone in this context beside the head."""
        return len(self.head) + self._reserve(job) + 1 <= self.n_ctx

    def run(self, head: list[int], jobs: list[Job]) -> list[Done]:
        """Decode every job (each must start with ``head`` and pass ``fits``), ``parallel`` at a time."""
        self._hold_head(head)
        lib, t0 = self.lib, time.perf_counter()
        queue, slots, done = list(range(len(jobs))), {}, {}
        reserved = 0
        try:
            while queue or slots:
                items: list[tuple[int, int, int, bool]] = []
                while queue and len(slots) < self.parallel:
                    job = jobs[queue[0]]
                    need = self._reserve(job)
                    if slots and len(self.head) + reserved + need + 1 > self.n_ctx:
                        break  # wait for a slot to free its room
                    r = queue.pop(0)
                    seq = next(s for s in range(1, self.parallel + 1) if s not in slots)
                    lib.llama_memory_seq_rm(self.mem, seq, -1, -1)
                    lib.llama_memory_seq_cp(self.mem, 0, seq, -1, -1)
                    tail = job.tokens[len(self.head):]
                    items += [(t, len(self.head) + i, seq, i == len(tail) - 1) for i, t in enumerate(tail)]
                    slots[seq] = _Slot(r, len(job.tokens), self._chain(job))
                    reserved += need
                for seq, sl in slots.items():
                    if sl.last is not None:
                        items.append((sl.last, sl.pos, seq, True))
                        sl.pos += 1
                nxt = self._decode(items, slots)
                for seq in list(slots):
                    sl, tok = slots[seq], nxt[seq]
                    job = jobs[sl.job]
                    reason = ""
                    if lib.llama_vocab_is_eog(self.vocab, tok):
                        reason = "stop"
                    else:
                        sl.out.append(tok)
                        sl.pieces += self._piece(tok)
                        sl.last = tok
                        text = sl.pieces.decode("utf-8", errors="ignore")
                        cut = min((text.find(s) for s in job.stop if s and s in text), default=-1)
                        if cut >= 0:
                            done[sl.job] = Done(text[:cut], len(sl.out), "stop", time.perf_counter() - t0)
                        elif len(sl.out) >= job.max_tokens:
                            reason = "length"
                    if reason:
                        text = sl.pieces.decode("utf-8", errors="replace")
                        done[sl.job] = Done(text, len(sl.out), reason, time.perf_counter() - t0)
                    if sl.job in done:
                        lib.llama_sampler_free(sl.chain)
                        lib.llama_memory_seq_rm(self.mem, seq, -1, -1)
                        reserved -= self._reserve(job)
                        del slots[seq]
        finally:
            for sl in slots.values():  # an exception mid-batch: free what is still held
                lib.llama_sampler_free(sl.chain)
            for seq in range(1, self.parallel + 1):
                lib.llama_memory_seq_rm(self.mem, seq, -1, -1)
        return [done[i] for i in range(len(jobs))]
