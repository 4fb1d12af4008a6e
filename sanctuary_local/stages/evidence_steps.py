"""The steps of ``stages.evidence.EvidenceRetriever`` (SANCTUARY §4.2–4.4) as functions:
the coarse BM25 index of a claim (from the index cache when the key matches), the
grouping of retrieved segments by document before chunking, and the dense search with
dedup and threshold. The retriever holds the models and the config; these take them as
arguments. ``Clock`` accumulates the sub-stage seconds a claim's ``timings`` report.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from typing import Any, Sequence

from sanctuary_local.config.settings import RetrievalConfig
from sanctuary_local.records import Document, EvidenceSnippet, Query, QueryEvidence, Segment
from sanctuary_local.retrieval.bm25 import BM25Engine, index_cache_path, load_cached, make_engine, save_cached
from sanctuary_local.retrieval.chunking import consolidate
from sanctuary_local.retrieval.dense import dense_search, select_snippets
from sanctuary_local.retrieval.segment import Corpus, build_corpus

# The stage's logger (``sanctuary_local.stages.evidence``): the run log prints logger names,
# and these lines keep the name they had before this module was split off.
log = logging.getLogger(__name__.removesuffix("_steps"))

#: Dense candidates examined per query before dedup/threshold (×max_snippets).
CANDIDATES_PER_SNIPPET = 8


class Clock:
    """Accumulates sub-stage seconds into ``timings``."""

    def __init__(self) -> None:
        self.timings: dict[str, float] = {}
        self._t0 = self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.timings[name] = round(self.timings.get(name, 0.0) + now - self._last, 4)
        self._last = now

    def total(self) -> dict[str, float]:
        self.timings["total"] = round(time.perf_counter() - self._t0, 4)
        return self.timings


# ------------------------------------------------------------------ coarse (§4.2)
def coarse_index(cfg: RetrievalConfig, documents: Sequence[Document], cache_key: str | None,
                 clock: Clock) -> tuple[Corpus, BM25Engine]:
    """Segments + BM25 index of one claim, from the cache when the key matches."""
    path = None
    if cache_key and cfg.index_cache:
        path = index_cache_path(cfg.index_cache, cache_key, cfg.engine, cfg.bm25_k1, cfg.bm25_b, cfg.segment_tokens)
        cached = load_cached(path)
        if cached is not None:
            clock.lap("index_cache_load")
            return cached
    engine = make_engine(cfg.engine, cfg.bm25_k1, cfg.bm25_b)
    corpus = build_corpus(documents, cfg.segment_tokens, token_ids=engine.needs_token_ids)
    clock.lap("segment")
    engine.index(corpus)
    clock.lap("index")
    if path is not None:
        try:
            save_cached(path, corpus, engine)
        except OSError as exc:  # the cache is an optimisation: a full disk must not fail the claim
            log.warning("index cache not written (%s): %s", path, exc)
        clock.lap("index_cache_save")
    return corpus, engine


# ------------------------------------------------------------------ chunking (§4.2–4.3)
def documents_to_chunk(documents: Sequence[Document],
                       walked: list[list[Segment]]) -> list[tuple[Document, str, list[tuple[int, int]]]]:
    """Retrieved segments grouped by document URL (§4.2) and consolidated: the
    ``(document, text, spans)`` work of ``SemanticChunking.chunk_documents``; a segment
    retrieved by several queries appears once."""
    by_doc: dict[int, list[Segment]] = defaultdict(list)
    for segs in walked:
        for s in segs:
            by_doc[s.doc_position].append(s)
    docs = {d.position: d for d in documents}
    # Group by URL first (paper), then by document position: repeated URLs stay
    # separate documents so every snippet keeps its exact document index.
    order = sorted(by_doc, key=lambda p: (docs[p].url, p))
    return [(docs[p], docs[p].text, consolidate(set(by_doc[p]))) for p in order]


# ------------------------------------------------------------------ dense (§4.4)
def chunk_vectors(cfg: RetrievalConfig, sts: Any, retriever: Any, chunks, vectors, queries: Sequence[Query]):
    """Retriever-space vectors of the chunks that go to dense search (and those chunks).

    Pooled vectors are used as they are when the STS model is the retriever; with
    ``prefilter`` = N > 0 (STS model ≠ retriever) each query's best N chunks by pooled
    STS cosine are pre-selected and only their union is embedded with the retriever."""
    if vectors is not None and cfg.chunk_vectors == "pool" and sts is retriever:
        return chunks, vectors
    if vectors is not None and cfg.prefilter > 0 and len(chunks) > cfg.prefilter:
        sq = sts.encode_queries([q.text for q in queries])
        _, ids = dense_search(sq, vectors, cfg.prefilter, "cpu")
        chunks = [chunks[j] for j in sorted(set(ids[ids >= 0].tolist()))]
    return chunks, retriever.encode_documents([c.text for c in chunks])


def dense_snippets(cfg: RetrievalConfig, sts: Any, retriever: Any, chunks, vectors, queries: Sequence[Query],
                   clock: Clock) -> tuple[list[list[EvidenceSnippet]], QueryEvidence | None]:
    """Embed (or pool), FAISS search, dedup (> 0.9) and threshold, ≤ max_snippets per
    query; plus, when no query kept anything, the best candidate below the threshold
    (see ``ClaimEvidence.below_threshold``)."""
    rcfg = cfg.retriever
    if not chunks:
        clock.lap("embed")
        return [[] for _ in queries], None
    chunks, c_emb = chunk_vectors(cfg, sts, retriever, chunks, vectors, queries)
    q_emb = retriever.encode_queries([q.text for q in queries])
    clock.lap("embed")
    k = cfg.max_snippets * CANDIDATES_PER_SNIPPET
    scores, ids = dense_search(q_emb, c_emb, k, cfg.faiss_device)
    out = []
    for i in range(len(queries)):
        kept = select_snippets(scores[i], ids[i], c_emb, rcfg.similarity_threshold, cfg.dedup_threshold, cfg.max_snippets)
        out.append([EvidenceSnippet(chunks[j], round(s, 6)) for j, s in kept])
    clock.lap("faiss")
    return out, (None if any(out) else _best_below(chunks, queries, scores, ids))


def _best_below(chunks, queries: Sequence[Query], scores, ids) -> QueryEvidence | None:
    """The single best (query, chunk) candidate of a claim whose queries all came back
    empty: each query's top FAISS hit, the highest cosine over the queries."""
    best: tuple[float, int, int] | None = None
    for i in range(len(queries)):
        if ids.shape[1] and ids[i][0] >= 0 and (best is None or float(scores[i][0]) > best[0]):
            best = (float(scores[i][0]), i, int(ids[i][0]))
    if best is None:
        return None
    score, i, j = best
    return QueryEvidence(queries[i], (EvidenceSnippet(chunks[j], round(score, 6)),))
