"""Where stage 2 reads a claim's documents: a per-claim knowledge store or a corpus index.

``open_source(path)`` gives a ``KnowledgeStore`` for a store folder or zip, and a
``CorpusSource`` for a folder written by ``sanctuary-local index``. The corpus is shared
by every claim: ``claim_inputs`` runs the claim's queries against the corpus's BM25 index
(the coarse step of §4.2) and returns what the per-claim path would have built, the
documents holding the hits and the hits as ``Segment`` records, so the semantic chunking,
dense search and verdict run unchanged on them.

A corpus document is one unit of the index (a file, a PDF page, a store line): its
``position`` is the unit's number in the index generation, its ``url`` the page's own
URL or the file path (``#page=N`` for a PDF page), and its text the unit's extracted
text, so every snippet's ``start``/``end`` is a span of the extracted text and
``CorpusIndex.provenance`` turns it into file, page and span.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from sanctuary_local.corpus.index import CorpusIndex, is_corpus_index, pinned
from sanctuary_local.records import ClaimEvidence, Document, Query, Segment

__all__ = ["CorpusSource", "open_source", "retrieval_path", "source_key"]


class CorpusSource:
    """A corpus index as stage 2's evidence source: every claim has the whole corpus."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.index = CorpusIndex(path)

    def __repr__(self) -> str:
        return f"CorpusSource({str(self.path)!r}, {self.index.n_units} units, {self.index.n_segments} segments)"

    def has(self, claim_index: int) -> bool:
        return True

    def file_name(self, claim_index: int) -> str:
        return str(self.path)

    def fingerprint(self, claim_index: int) -> str:
        return self.index.fingerprint

    def claim_inputs(self, claim_index: int, queries: Sequence[Query], k: int) -> tuple[list[Document], list[list[Segment]]]:
        """The top-``k`` segments of each query over the corpus (best first) as the
        claim's ``Segment`` records, and the documents (units) they lie in, by position."""
        hits: list[list[Segment]] = []
        for q in queries:
            ids, _ = self.index.search(q.text, k)
            segs = []
            for s in ids.tolist():
                unit, start, end, ntok = self.index.segment(s)
                segs.append(Segment(claim_index, unit, start, end, ntok))
            hits.append(segs)
        units = sorted({s.doc_position for segs in hits for s in segs})
        docs = [Document(claim_index, u, self.index.unit_url(u), (self.index.unit_text(u),), type="corpus")
                for u in units]
        return docs, hits

    def retrieve(self, retriever: Any, claim_index: int, queries: Sequence[Query]) -> ClaimEvidence:
        """Stage 2 of one claim: the corpus's coarse hits, then ``retriever.retrieve_hits``
        (an ``EvidenceRetriever``: semantic chunking, dense search, thresholds)."""
        t0 = time.perf_counter()
        documents, hits = self.claim_inputs(claim_index, queries, retriever.cfg.top_k_segments)
        bm25_s = round(time.perf_counter() - t0, 4)
        if not queries:
            return ClaimEvidence(claim_index, (), ("no_queries",), {"bm25": bm25_s})
        ev = retriever.retrieve_hits(documents, queries, hits)
        return replace(ev, claim_index=claim_index, timings={"bm25": bm25_s, **ev.timings})


def open_source(path: str | Path):
    """A ``CorpusSource`` for a corpus index folder, else a ``KnowledgeStore``."""
    if is_corpus_index(path):
        return CorpusSource(path)
    from sanctuary_local.io.store import KnowledgeStore

    return KnowledgeStore(path)


def retrieval_path(source: Any, path: str | Path) -> str | Path:
    """The path a run's retrieval workers open: for a corpus, the generation ``source`` read
    when the run started (``index.pinned``; a rerun of ``index`` meanwhile must not hand the
    workers another generation, whose unit numbers name other documents), else ``path``."""
    return pinned(source.index) if isinstance(source, CorpusSource) else path


def source_key(path: str | Path) -> str:
    """What a run's fingerprint records of its source: the resolved path, and for a
    corpus index also its generation (a re-index renumbers units: no stale resume)."""
    if is_corpus_index(path):
        return CorpusIndex(path).fingerprint
    return str(Path(path).resolve())
