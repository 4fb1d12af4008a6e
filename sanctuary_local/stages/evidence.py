"""Stage 2: coarse BM25 → semantic chunking → dense search (SANCTUARY §4.2–4.4).

``EvidenceRetriever.retrieve`` maps one claim's documents and queries to a
``ClaimEvidence``: per query ≤ ``max_snippets`` verbatim snippets, best first, each with
url, document position and exact character span (§5.5 audit). It never raises on bad
content: zero documents, empty documents and queries without hits give empty results
with a flag. ``run_retrieval`` runs it over a knowledge store with a process pool, one
claim at a time per worker (bounded memory), as the paper does (§4.2). Pool workers die
with the process that started them (``procs.die_with_parent``) and ignore Ctrl-C, which
is the parent's to handle (graceful stop: the claims in flight finish).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from sanctuary_local.config.settings import RetrievalConfig
from sanctuary_local.records import (
    ClaimEvidence, Document, EvidenceSnippet, HydeResult, Query, QueryEvidence, Segment,
)
from sanctuary_local.retrieval.bm25 import BM25Engine, make_engine
from sanctuary_local.retrieval.chunking import SemanticChunking
from sanctuary_local.retrieval.embed import make_embedder
from sanctuary_local.retrieval.segment import Corpus
from sanctuary_local.stages.evidence_steps import Clock as _Clock
from sanctuary_local.stages.evidence_steps import coarse_index, dense_snippets, documents_to_chunk

__all__ = ["EvidenceRetriever", "RetrievalPool", "WORKER_FAILED", "run_retrieval"]

#: Flag of a claim whose pool worker died (e.g. killed for memory) before returning.
WORKER_FAILED = "retrieval_error: worker failed"
#: EmbedderConfig fields that decide the loaded weights (prompts/threshold are per call).
_MODEL_FIELDS = ("model", "trust_remote_code", "device", "max_seq_length")


class EvidenceRetriever:
    """Loads the embedders once; ``retrieve`` is then called claim after claim."""

    def __init__(self, cfg: RetrievalConfig, models_dir: str | Path = "models") -> None:
        self.cfg = cfg
        make_engine(cfg.engine, cfg.bm25_k1, cfg.bm25_b)  # validate the engine name eagerly
        self.retriever = make_embedder(cfg.retriever, models_dir)
        # One model in memory when both roles use the same model and settings (CPU default).
        same = all(getattr(cfg.sts, f) == getattr(cfg.retriever, f) for f in _MODEL_FIELDS)
        self.sts = self.retriever if same else make_embedder(cfg.sts, models_dir)
        if cfg.chunk_vectors == "pool" and not same and not cfg.prefilter:
            from sanctuary_local.errors import UserError

            raise UserError("retrieval.chunk_vectors = 'pool' needs retrieval.sts = retrieval.retriever "
                            "(pooled STS vectors are not in the retriever's space) or retrieval.prefilter > 0")
        self.chunking = SemanticChunking(cfg, self.sts)

    # ------------------------------------------------------------------ coarse (§4.2)
    def coarse_index(self, documents: Sequence[Document], cache_key: str | None, clock: _Clock) -> tuple[Corpus, BM25Engine]:
        """Segments + BM25 index of one claim, from the cache when the key matches."""
        return coarse_index(self.cfg, documents, cache_key, clock)

    def coarse_search(self, corpus: Corpus, engine: BM25Engine, queries: Sequence[Query]) -> list[list[Segment]]:
        """Top-``top_k_segments`` segments per query, best first."""
        out = []
        for q in queries:
            idx, _ = engine.search(corpus.query_ids(q.text), self.cfg.top_k_segments)
            out.append([corpus.segments[i] for i in idx.tolist()])
        return out

    # --------------------------------------------------------------- claim (§4.2–4.4)
    def retrieve(self, documents: Sequence[Document], queries: Sequence[Query], *, cache_key: str | None = None) -> ClaimEvidence:
        """Evidence snippets for every query of one claim (see module docstring)."""
        clock = _Clock()
        claim = documents[0].claim_index if documents else (queries[0].claim_index if queries else -1)
        flags: list[str] = []
        if not documents:
            flags.append("no_documents")
        if not queries:
            flags.append("no_queries")
        if not documents or not queries:
            return ClaimEvidence(claim, tuple(QueryEvidence(q) for q in queries), tuple(flags), clock.total())
        corpus, engine = self.coarse_index(documents, cache_key, clock)
        # "Empty" = nothing BM25 could index: no word character in the document.
        empty = sum(1 for d in documents if not corpus.doc_tokens.get(d.position, 0))
        if empty:
            flags.append(f"empty_documents:{empty}")
        hits = self.coarse_search(corpus, engine, queries)
        clock.lap("bm25")
        return self.retrieve_hits(documents, queries, hits, flags=flags, clock=clock)

    def retrieve_hits(self, documents: Sequence[Document], queries: Sequence[Query], hits: list[list[Segment]], *,
                      flags: list[str] | None = None, clock: _Clock | None = None) -> ClaimEvidence:
        """The semantic part (§4.3–4.4) on coarse hits found elsewhere (a corpus index,
        ``corpus/source.py``): ``hits[i]`` are query i's segments, best first, each in one
        of ``documents`` (by position)."""
        clock = clock or _Clock()
        flags = list(flags or ())
        claim = documents[0].claim_index if documents else (queries[0].claim_index if queries else -1)
        flags += [f"no_hits:q{q.number}" for q, h in zip(queries, hits) if not h]
        chunks, vectors = self._chunks(documents, hits)
        clock.lap("chunk")
        per_query, below = self._dense(chunks, vectors, queries, clock)
        flags += [f"no_snippets:q{q.number}" for q, s in zip(queries, per_query) if not s and any(hits)]
        result = tuple(QueryEvidence(q, tuple(s)) for q, s in zip(queries, per_query))
        return ClaimEvidence(claim, result, tuple(flags), clock.total(), below)

    def semantic_segments(self, hits: list[list[Segment]]) -> list[list[Segment]]:
        """Each query's segments that go through chunking + embedding (``early_stop``)."""
        return early_stop(hits, self.cfg.semantic_candidates, self.cfg.chunk_size)

    def _chunks(self, documents: Sequence[Document], hits: list[list[Segment]]):
        """Retrieved segments grouped by document URL (§4.2), consolidated, chunked (§4.3);
        a segment retrieved by several queries is chunked and embedded once. Returns the
        chunks and, when pooling or pre-selection is on, their pooled STS vectors."""
        work = documents_to_chunk(documents, self.semantic_segments(hits))
        if self.cfg.chunk_vectors == "pool" or self.cfg.prefilter > 0:
            return self.chunking.chunk_documents(work, pool=True)
        return self.chunking.chunk_documents(work), None

    def _dense(self, chunks, vectors, queries: Sequence[Query], clock: _Clock) -> tuple[list[list[EvidenceSnippet]], QueryEvidence | None]:
        """Dense search of the chunks for every query (``evidence_steps.dense_snippets``)."""
        return dense_snippets(self.cfg, self.sts, self.retriever, chunks, vectors, queries, clock)


# ----------------------------------------------------------------- process pool


def early_stop(hits: list[list[Segment]], n: int, chunk_size: int) -> list[list[Segment]]:
    """Each query's segments that go through chunking + embedding.

    With ``semantic_candidates`` = N > 0 a query's segments are walked in BM25 order
    and the walk stops once they hold N × ``chunk_size`` tokens, the text of N full
    chunks (default N = 64 = the dense candidates examined per query). An
    approximation, not a proof: a lower-ranked segment could hold a chunk closer to
    the query; its effect is measured (docs/retrieval.md, issue 14)."""
    if n <= 0:
        return hits
    need = n * chunk_size
    out = []
    for segs in hits:
        total, k = 0, 0
        while k < len(segs) and total < need:
            total += segs[k].n_tokens
            k += 1
        out.append(segs[:k])
    return out


_WORKER: dict[str, Any] = {}


def _init_worker(cfg: RetrievalConfig, models_dir: str, store_path: str, parent_pid: int | None = None) -> None:
    from sanctuary_local.corpus.source import open_source

    if parent_pid is not None:  # a pool worker (not the in-process workers == 1 case)
        from sanctuary_local.procs import die_with_parent

        die_with_parent(parent_pid)  # first: loading the models below takes seconds
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it lets this claim finish
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # held since the spawn (_spawning)
    _WORKER["retriever"] = EvidenceRetriever(cfg, models_dir)
    _WORKER["store"] = open_source(store_path)  # a KnowledgeStore, or a corpus index (issue 28)


def _one_claim(claim_index: int, queries: tuple[Query, ...]) -> ClaimEvidence:
    """Retrieve one claim in a worker; any exception becomes a flagged empty result."""
    try:
        store = _WORKER["store"]
        if hasattr(store, "claim_inputs"):  # a corpus index: its own coarse step (corpus/source.py)
            return store.retrieve(_WORKER["retriever"], claim_index, queries)
        if not store.has(claim_index):
            return ClaimEvidence(claim_index, tuple(QueryEvidence(q) for q in queries), ("store_missing",))
        t0 = time.perf_counter()
        loaded = store.load(claim_index)
        load_s = time.perf_counter() - t0
        if loaded.missing:
            return ClaimEvidence(claim_index, tuple(QueryEvidence(q) for q in queries), ("store_missing",))
        ev = _WORKER["retriever"].retrieve(loaded.documents, queries, cache_key=store.fingerprint(claim_index))
        extra = tuple(f"store_problems:{len(loaded.problems)}" for _ in [0] if loaded.problems)
        timings = {"load": round(load_s, 4), **ev.timings}
        return replace(ev, claim_index=claim_index, flags=ev.flags + extra, timings=timings)
    except Exception as exc:  # noqa: BLE001 - one bad claim never kills the batch
        msg = f"{type(exc).__name__}: {exc}".replace("\n", " ")[:300]
        return ClaimEvidence(claim_index, tuple(QueryEvidence(q) for q in queries), (f"retrieval_error: {msg}",))


def _prepare_static(cfg: RetrievalConfig, models_dir: str | Path) -> None:
    """Distil (or find cached) the ``static:`` models the config names, in this process."""
    from sanctuary_local.retrieval.embed import STATIC_PREFIX, distill_static

    for section in (cfg.sts, cfg.retriever):
        if section.model.startswith(STATIC_PREFIX):
            distill_static(section.model[len(STATIC_PREFIX):], models_dir)


@contextlib.contextmanager
def _spawning() -> Iterator[None]:
    """Hold SIGINT in this thread while the pool may start a worker: the worker inherits
    it held, so a Ctrl-C to the process group while it imports (a second or two) waits
    until ``_init_worker`` ignores it, instead of a KeyboardInterrupt traceback and a dead
    worker. Another thread of the run still takes the signal (``interrupt.StopRequest``)."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


class RetrievalPool:
    """A persistent pool of retrieval workers (each loads the models once and opens the
    store itself). ``submit`` returns a future of a ``ClaimEvidence``; a worker crash
    becomes a flagged result (``WORKER_FAILED``), never an exception; ``cancel_pending``
    cancels the claims not yet started (their futures end cancelled). ``workers == 1``
    runs in-process.

    Used by ``run_retrieval`` and by the pipeline to overlap stage 2 on the CPU with
    stage-1 generation on the GPU (claims in waves)."""

    def __init__(self, store_path: str | Path, cfg: RetrievalConfig, *, models_dir: str | Path = "models",
                 workers: int | None = None) -> None:
        self.store_path = Path(store_path)
        self.workers = max(1, workers or cfg.workers or os.cpu_count() or 1)
        self._exists = self.store_path.exists()
        self._pool: ProcessPoolExecutor | None = None
        self._inner: set[Future] = set()
        if not self._exists:
            return
        if self.workers == 1:
            _init_worker(cfg, str(models_dir), str(store_path))
        else:
            _prepare_static(cfg, models_dir)  # a static model is distilled once here, not once per worker
            ctx = get_context("spawn")  # fork + torch threads deadlocks; spawn is safe everywhere
            self._pool = ProcessPoolExecutor(self.workers, mp_context=ctx, initializer=_init_worker,
                                             initargs=(cfg, str(models_dir), str(store_path), os.getpid()))

    def submit(self, hyde: HydeResult) -> Future:
        """Retrieve one claim; the future's result is its ``ClaimEvidence``."""
        i, qs = hyde.claim_index, tuple(hyde.queries)
        if self._pool is None:
            fut: Future = Future()
            fut.set_result(_one_claim(i, qs) if self._exists else
                           ClaimEvidence(i, tuple(QueryEvidence(q) for q in qs), ("store_missing",)))
            return fut
        with _spawning():  # a submit may start a worker
            inner = self._pool.submit(_one_claim, i, qs)
        self._inner.add(inner)
        outer: Future = Future()

        def relay(f: Future) -> None:
            self._inner.discard(f)
            if f.cancelled():  # cancel_pending / close: never started, nothing to record
                outer.cancel()
                outer.set_running_or_notify_cancel()  # else concurrent.futures.wait never sees it done
                return
            try:
                outer.set_result(f.result())
            except Exception as exc:  # noqa: BLE001 - a worker died (e.g. killed for memory)
                outer.set_result(ClaimEvidence(i, tuple(QueryEvidence(q) for q in qs),
                                               (f"{WORKER_FAILED}: {exc}",)))

        inner.add_done_callback(relay)
        return outer

    @property
    def in_process(self) -> bool:
        """True when ``submit`` computes the claim before returning (``workers == 1``)."""
        return self._pool is None

    def cancel_pending(self) -> None:
        """Cancel the claims no worker has started; the ones in flight still finish."""
        for f in list(self._inner):
            f.cancel()  # only succeeds for a claim still waiting for a worker

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        _WORKER.clear()

    def __enter__(self) -> RetrievalPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_retrieval(
    store_path: str | Path,
    hyde: Sequence[HydeResult],
    cfg: RetrievalConfig,
    *,
    models_dir: str | Path = "models",
    workers: int | None = None,
    on_result: Callable[[ClaimEvidence], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> list[ClaimEvidence]:
    """Stage 2 over a knowledge store; results in input order, ``on_result`` in completion order.

    Once ``should_stop()`` turns true (checked twice a second) the claims not yet started
    are cancelled and the ones in flight finish: the result then holds only the finished
    claims, still in input order."""
    n = max(1, min(workers or cfg.workers or os.cpu_count() or 1, len(hyde) or 1))
    results: list[ClaimEvidence | None] = [None] * len(hyde)
    with RetrievalPool(store_path, cfg, models_dir=models_dir, workers=n) as pool:
        if pool.in_process:  # claim by claim, so a stop request lands between claims
            for pos, h in enumerate(hyde):
                if should_stop is not None and should_stop():
                    break
                results[pos] = res = pool.submit(h).result()
                if on_result:
                    on_result(res)
            return [r for r in results if r is not None]
        futures = {pool.submit(h): pos for pos, h in enumerate(hyde)}
        pending, stopping = set(futures), False
        while pending:
            done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            for fut in sorted(done, key=futures.__getitem__):
                if fut.cancelled():
                    continue
                results[futures[fut]] = res = fut.result()
                if on_result:
                    on_result(res)
            if not stopping and should_stop is not None and should_stop():
                stopping = True
                pool.cancel_pending()
    return [r for r in results if r is not None]
