"""Semantic chunking of retrieved text (SANCTUARY §4.3, parameters of §5.4).

Per retrieved document, its retrieved segments are consolidated in document order;
segments that touch (``seg.end == next.start``, always true for neighbours) merge into
one *run* = one contiguous slice of ``Document.text``. Each run is split into sentences
and grouped by chonkie's ``SemanticChunker``; chunk offsets are run-relative and are
shifted back to document offsets, so ``doc.text[chunk.start:chunk.end] == chunk.text``.
Runs are chunked separately (not glued together) because a chunk spanning two
non-adjacent runs would not be a verbatim span of the document (audit, §5.5).

Paper parameter → chonkie 1.7 parameter:
- chunk_size = 140        → ``chunk_size=140`` (max tokens per chunk, STS tokeniser)
- min_sentences = 2       → ``min_sentences_per_chunk=2`` (minimum distance between split points)
- similarity_window = 1   → ``similarity_window=1``
- min_chunk_size = 30     → no longer a chonkie parameter (removed after 0.x); applied here
  after chunking: a chunk under 30 tokens is merged into its neighbour in the same run.
- threshold: chonkie 1.7's default (0.8, a percentile of the similarity minima).

Pooled chunk vectors (``chunk_documents(..., pool=True)``): chonkie groups whole
sentences, and every sentence was already embedded once to find the boundaries, so a
chunk's vector can be the normalised mean of its sentences' unit vectors instead of a
second forward pass over the chunk text (issue 14: that pass cost as much as chunking).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Sequence

import numpy as np

from sanctuary_local.config.settings import RetrievalConfig
from sanctuary_local.records import Chunk, Document, Segment
from sanctuary_local.retrieval.embed import CachedChonkieEmbeddings, Embedder, StaticEmbedder

__all__ = ["SemanticChunking", "consolidate", "pool_vectors", "strip_span"]


def consolidate(segments: Sequence[Segment]) -> list[tuple[int, int]]:
    """Merge one document's retrieved segments into sorted, disjoint, contiguous runs."""
    runs: list[tuple[int, int]] = []
    for seg in sorted(segments, key=lambda s: s.start):
        if runs and seg.start <= runs[-1][1]:
            runs[-1] = (runs[-1][0], max(runs[-1][1], seg.end))
        else:
            runs.append((seg.start, seg.end))
    return runs


def strip_span(text: str, start: int, end: int) -> tuple[int, int]:
    """Shrink [start, end) of ``text`` past leading/trailing whitespace."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def pool_vectors(vectors: np.ndarray) -> np.ndarray:
    """Unit vector of the mean of (n, d) unit sentence vectors (cosine-ready chunk vector)."""
    mean = np.asarray(vectors, dtype=np.float32).mean(axis=0)
    return mean / max(float(np.linalg.norm(mean)), 1e-12)


def _sentence_starts(run: str, sentences: list[str]) -> list[int] | None:
    """Run-relative start of every sentence; None when they do not tile the run."""
    starts, pos = [], 0
    for sent in sentences:
        if not run.startswith(sent, pos):
            return None
        starts.append(pos)
        pos += len(sent)
    return starts if pos == len(run) else None


class SemanticChunking:
    """chonkie SemanticChunker over an STS embedder (loaded once, reused)."""

    def __init__(self, cfg: RetrievalConfig, embedder: Embedder | StaticEmbedder) -> None:
        from chonkie import SemanticChunker

        self.cfg = cfg
        self.embeddings = CachedChonkieEmbeddings(embedder)
        self.chunker = SemanticChunker(
            embedding_model=self.embeddings,
            chunk_size=cfg.chunk_size,
            min_sentences_per_chunk=cfg.min_sentences,
            similarity_window=cfg.similarity_window,
        )

    def _sentences(self, text: str) -> list[str]:
        # Same splitter the chunker uses; called only to embed a claim's sentences in
        # one large batch (prime) before chunking run by run.
        return self.chunker._split_sentences(text)  # noqa: SLF001

    def chunk_documents(self, docs: Sequence[tuple[Document, str, list[tuple[int, int]]]], *,
                        pool: bool = False) -> list[Chunk] | tuple[list[Chunk], np.ndarray]:
        """Chunks of every (document, its text, runs); order: input docs, then offset.

        With ``pool`` also their (n, d) unit vectors, each the normalised mean of the STS
        vectors of the sentences the chunk covers (``pool_vectors``)."""
        self.embeddings.clear()  # bound memory: the cache lives for one claim
        self.embeddings.prime([s for _, text, runs in docs for a, b in runs for s in self._sentences(text[a:b])])
        out: list[Chunk] = []
        vecs: list[np.ndarray] = []
        for doc, text, runs in docs:
            for a, b in runs:
                chunks, v = self._chunk_run(doc, text, a, b, pool)
                out.extend(chunks)
                vecs.extend(v)
        self.embeddings.clear()
        if not pool:
            return out
        return out, (np.stack(vecs) if vecs else np.zeros((0, self.embeddings.dimension), np.float32))

    def _pooled(self, run: str, spans: list[list[int]], a: int) -> list[np.ndarray]:
        """One pooled vector per run-relative span: its sentences' mean (see module doc)."""
        sentences = self._sentences(run)
        starts = _sentence_starts(run, sentences)
        out = []
        for s, e, _ in spans:
            if starts is None:  # the splitter did not tile the run: embed the span itself
                group = [run[s - a : e - a]]
            else:
                group = sentences[max(0, bisect_right(starts, s - a) - 1) : max(1, bisect_left(starts, e - a))]
            out.append(pool_vectors(np.stack(self.embeddings.embed_batch(group))))
        return out

    def _chunk_run(self, doc: Document, text: str, a: int, b: int, pool: bool = False) -> tuple[list[Chunk], list[np.ndarray]]:
        run = text[a:b]
        spans: list[list[int]] = []  # [start, end, tokens], document offsets
        cursor = 0
        for c in self.chunker.chunk(run):
            s = c.start_index
            if run[s : c.end_index] != c.text:  # chonkie offsets are cumulative lengths: verify
                s = run.find(c.text, cursor)
                if s < 0:
                    continue  # cannot be located verbatim: never emit an unverifiable span
            cursor = s + len(c.text)
            spans.append([a + s, a + cursor, int(c.token_count)])
        spans = self._merge_short(spans)
        vectors = self._pooled(run, spans, a) if pool else [None] * len(spans)
        chunks, kept = [], []
        for (s, e, n), v in zip(spans, vectors):
            s, e = strip_span(text, s, e)
            if e > s:
                chunks.append(Chunk(doc.claim_index, doc.position, doc.url, s, e, text[s:e], n))
                kept.append(v)
        return chunks, (kept if pool else [])

    def _merge_short(self, spans: list[list[int]]) -> list[list[int]]:
        """Apply the paper's 30-token minimum: merge a short chunk into its predecessor."""
        merged: list[list[int]] = []
        for span in spans:
            if merged and (span[2] < self.cfg.min_chunk_tokens or merged[-1][2] < self.cfg.min_chunk_tokens) \
                    and span[0] == merged[-1][1]:
                merged[-1] = [merged[-1][0], span[1], merged[-1][2] + span[2]]
            else:
                merged.append(list(span))
        return merged


