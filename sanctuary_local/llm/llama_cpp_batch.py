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

The text is not byte-identical to the one-at-a-time path's: batched matrix products add in
another order (a near-tie between two tokens can go the other way), and a sampled request's
seeded draw comes from its own chain, not llama-cpp-python's stream; the throughput benchmark
(``benchmarks/speed/throughput.py``) counts the claims whose stage-1 text differs (all 50 at
temperature 0.5) and scores both.
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass, field
from typing import Any

from sanctuary_local.config.llm import SamplingConfig
from sanctuary_local.llm.base import ChatRequest, ChatResult

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

    def advance(self, job: Job, token: int, piece: bytes, end: bool, seconds: float) -> Done | None:
        """Take the sampled ``token`` (``end``: an end-of-generation token); the finished job, or None."""
        if end:
            return Done(self.pieces.decode("utf-8", errors="replace"), len(self.out), "stop", seconds)
        self.out.append(token)
        self.pieces += piece
        self.last = token
        text = self.pieces.decode("utf-8", errors="ignore")
        cut = min((text.find(s) for s in job.stop if s and s in text), default=-1)
        if cut >= 0:  # cut at the stop string, as create_completion does
            return Done(text[:cut], len(self.out), "stop", seconds)
        if len(self.out) >= job.max_tokens:
            return Done(self.pieces.decode("utf-8", errors="replace"), len(self.out), "length", seconds)
        return None


def cells(job: Job) -> int:
    """KV cells a job may fill beside the shared head: the rest of its prompt and its completion."""
    return len(job.tokens) - job.head + job.max_tokens


def sampler_chain(lib: Any, vocab: Any, job: Job) -> Any:
    """A llama.cpp sampler chain for one sequence: the repeat penalty, the job's grammar, then
    greedy (temperature 0) or top-k / top-p / min-p / temperature / the seeded draw."""
    s = job.sampling
    chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
    parts = []
    if s.repetition_penalty != 1.0:
        parts.append(lib.llama_sampler_init_penalties(PENALTY_LAST_N, s.repetition_penalty, 0.0, 0.0))
    if job.grammar is not None:
        parts.append(lib.llama_sampler_init_grammar(vocab, job.grammar._grammar.encode(), job.grammar._root.encode()))
    if s.temperature <= 0.0:
        parts.append(lib.llama_sampler_init_greedy())
    else:
        parts += [lib.llama_sampler_init_top_k(s.top_k)] if s.top_k > 0 else []
        parts += [lib.llama_sampler_init_top_p(s.top_p, 1), lib.llama_sampler_init_min_p(s.min_p, 1),
                  lib.llama_sampler_init_temp(s.temperature), lib.llama_sampler_init_dist(s.seed & 0xFFFFFFFF)]
    for part in parts:
        lib.llama_sampler_chain_add(chain, part)
    return chain


def token_piece(lib: Any, vocab: Any, token: int) -> bytes:
    """The bytes of one token (a piece of a UTF-8 character for some)."""
    buf = (ctypes.c_char * 256)()
    n = lib.llama_token_to_piece(vocab, token, buf, len(buf), 0, False)
    return bytes(buf[: max(0, n)])


def batched(be: Any, batch: SequenceBatch, requests: list[ChatRequest]) -> dict[int, ChatResult]:
    """``requests`` decoded ``batch.parallel`` at a time, grouped by their fixed head, as the
    backend ``be`` (a ``LlamaCppBackend``) prepares them; a prompt the backend's context cannot
    hold gets its error result, one too long for the batch's context is left out (the backend
    runs it alone)."""
    out: dict[int, ChatResult] = {}
    groups: dict[tuple[int, ...], list[tuple[int, Job, dict[str, Any]]]] = {}
    for i, req in enumerate(requests):
        prep = be._prepare(req)
        if isinstance(prep, ChatResult):
            out[i] = prep
            continue
        tokens, max_tokens, head = prep
        grammar = be._grammar(req.json_schema) if req.json_schema is not None else None
        job = Job(tokens, head, req.sampling, max_tokens, (*be._stop, *req.sampling.stop), grammar)
        extra = {"grammar": grammar is not None, "room_capped": max_tokens < req.sampling.max_tokens,
                 "parallel": batch.parallel}
        groups.setdefault(tuple(tokens[:head]), []).append((i, job, extra))
    for head, members in groups.items():
        ready = [m for m in members if len(head) + cells(m[1]) < batch.n_ctx]
        for (i, job, extra), d in zip(ready, batch.run(list(head), [m[1] for m in ready]), strict=True):
            out[i] = ChatResult(d.text, len(job.tokens), d.completion_tokens, d.finish_reason, d.seconds,
                                extra=extra, cached_tokens=job.head)
    return out




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
        self.batch = llama_cpp.llama_batch_init(CHUNK, 0, 1)
        self.head: list[int] = []
        self.steps = 0  #: decode calls so far (each reads the weights once)

    def close(self) -> None:
        if self.ctx:
            self.lib.llama_batch_free(self.batch)
            self.lib.llama_free(self.ctx)
            self.ctx = None

    def _hold_head(self, head: list[int]) -> None:
        """Sequence 0 holds ``head`` (evaluated only when it differs from the one held)."""
        if head != self.head:
            self.lib.llama_memory_clear(self.mem, True)
            self.head = []
            self._decode([(t, i, 0, False) for i, t in enumerate(head)], {})
            self.head = list(head)

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

    def _start(self, r: int, job: Job, slots: dict[int, _Slot]) -> list[tuple[int, int, int, bool]]:
        """Job ``r`` takes a free slot: the head's cells shared into it, its prompt's rest to evaluate."""
        seq = next(s for s in range(1, self.parallel + 1) if s not in slots)
        self.lib.llama_memory_seq_rm(self.mem, seq, -1, -1)
        self.lib.llama_memory_seq_cp(self.mem, 0, seq, -1, -1)
        tail = job.tokens[len(self.head):]
        slots[seq] = _Slot(r, len(job.tokens), sampler_chain(self.lib, self.vocab, job))
        return [(t, len(self.head) + i, seq, i == len(tail) - 1) for i, t in enumerate(tail)]

    def run(self, head: list[int], jobs: list[Job]) -> list[Done]:
        """Decode every job (each starts with ``head`` and fits the context beside it), ``parallel`` at a time."""
        self._hold_head(head)
        lib, t0, queue, slots, done = self.lib, time.perf_counter(), list(range(len(jobs))), {}, {}
        try:
            while queue or slots:
                items: list[tuple[int, int, int, bool]] = []
                while queue and len(slots) < self.parallel and (
                        not slots or len(self.head) + sum(cells(jobs[s.job]) for s in slots.values())
                        + cells(jobs[queue[0]]) < self.n_ctx):
                    r = queue.pop(0)
                    items += self._start(r, jobs[r], slots)
                for seq, sl in slots.items():
                    if sl.last is not None:
                        items.append((sl.last, sl.pos, seq, True))
                        sl.pos += 1
                for seq, tok in self._decode(items, slots).items():
                    sl = slots[seq]
                    end = bool(lib.llama_vocab_is_eog(self.vocab, tok))
                    d = sl.advance(jobs[sl.job], tok, b"" if end else token_piece(lib, self.vocab, tok), end,
                                   time.perf_counter() - t0)
                    if d is not None:
                        done[sl.job] = d
                        lib.llama_sampler_free(slots.pop(seq).chain)
                        lib.llama_memory_seq_rm(self.mem, seq, -1, -1)
        finally:
            for sl in slots.values():  # an exception mid-batch: free what is still held
                lib.llama_sampler_free(sl.chain)
            for seq in range(1, self.parallel + 1):
                lib.llama_memory_seq_rm(self.mem, seq, -1, -1)
        return [done[i] for i in range(len(jobs))]
