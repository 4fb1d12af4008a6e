"""Coarse segmentation (SANCTUARY §4.2) and the BM25 tokeniser.

A *token* here is a maximal run of Unicode word characters (regex ``\\w+``), counted on
the original text. A segment is up to ``n_tokens`` such tokens, zero overlap; its span
starts at the separator characters that precede its first token and ends right after
its last token, so consecutive segments of a document are contiguous
(``seg[i].end == seg[i+1].start``) and ``document.text[start:end]`` is the segment.

BM25 terms are the same tokens lower-cased, minus English stop words (bm25s's list).
The whole claim is tokenised with C-level loops only (``re.findall``, ``dict.fromkeys``,
``map``) because a full-scale claim holds ~15 M tokens: a per-token Python loop costs
seconds there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain
from typing import Sequence

import numpy as np

from sanctuary_local.records import Document, Segment

__all__ = ["TOKENISER_ID", "Corpus", "segment_document", "build_corpus", "tokenize", "stopwords"]

#: Identifies the tokenisation in index cache keys; bump it when tokenisation changes.
TOKENISER_ID = "regex-w+-lower-stopen-v1"
_WORD = re.compile(r"\w+")


@lru_cache(maxsize=1)
def stopwords() -> frozenset[str]:
    """English stop words (bm25s's list, the one its default tokeniser uses)."""
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN)


@lru_cache(maxsize=8)
def _segment_re(n_tokens: int) -> re.Pattern[str]:
    # \W* and \w+ match disjoint classes, so the repetition never backtracks badly:
    # one match = the next ≤ n_tokens tokens with their leading separators.
    return re.compile(rf"(?:\W*\w+){{1,{n_tokens}}}")


def tokenize(text: str) -> list[str]:
    """BM25 terms of ``text``: lower-cased ``\\w+`` tokens minus English stop words."""
    stop = stopwords()
    return [t for t in _WORD.findall(text.lower()) if t not in stop]


def segment_document(doc: Document, n_tokens: int = 500, text: str | None = None) -> list[Segment]:
    """Cut ``doc`` into zero-overlap segments of ≤ ``n_tokens`` word tokens with exact spans."""
    text = doc.text if text is None else text
    out: list[Segment] = []
    for m in _segment_re(n_tokens).finditer(text):
        seg_text = m.group()
        out.append(Segment(doc.claim_index, doc.position, m.start(), m.end(), len(_WORD.findall(seg_text))))
    return out


@dataclass
class Corpus:
    """A claim's segments and their BM25 term ids (CSR layout: ``ids[indptr[i]:indptr[i+1]]``)."""

    segments: list[Segment]
    ids: np.ndarray  # int32 term ids, stop words removed
    indptr: np.ndarray  # int64, len(segments) + 1
    vocab: dict[str, int]

    @property
    def lengths(self) -> np.ndarray:
        """BM25 document length of every segment (terms after stop-word removal)."""
        return np.diff(self.indptr)

    def token_lists(self) -> list[np.ndarray]:
        """Per-segment term-id arrays (views, no copy)."""
        return [self.ids[a:b] for a, b in zip(self.indptr[:-1], self.indptr[1:])]

    def query_ids(self, text: str) -> np.ndarray:
        """Term ids of a query (duplicates kept, as rank-bm25 scores them; unknown terms dropped)."""
        vocab = self.vocab
        return np.fromiter((vocab[t] for t in tokenize(text) if t in vocab), dtype=np.int32)


def build_corpus(documents: Sequence[Document], n_tokens: int = 500) -> Corpus:
    """Segment every document and map all BM25 terms to ids in one vectorised pass."""
    segments: list[Segment] = []
    per_seg: list[list[str]] = []
    pattern = _segment_re(n_tokens)
    for doc in documents:
        text = doc.text
        for m in pattern.finditer(text):
            words = _WORD.findall(m.group().lower())
            segments.append(Segment(doc.claim_index, doc.position, m.start(), m.end(), len(words)))
            per_seg.append(words)
    lengths = np.fromiter((len(w) for w in per_seg), dtype=np.int64, count=len(per_seg))
    flat = list(chain.from_iterable(per_seg))
    del per_seg
    vocab: dict[str, int] = dict.fromkeys(flat)  # type: ignore[arg-type]  # insertion order = first occurrence
    for i, key in enumerate(vocab):
        vocab[key] = i
    ids = np.fromiter(map(vocab.__getitem__, flat), dtype=np.int32, count=len(flat))
    del flat
    # Stop words are dropped after id mapping: one numpy mask instead of a Python filter.
    stop_ids = np.fromiter((vocab[s] for s in stopwords() if s in vocab), dtype=np.int32)
    keep = ~np.isin(ids, stop_ids)
    seg_of = np.repeat(np.arange(len(segments), dtype=np.int64), lengths)
    kept_len = np.bincount(seg_of[keep], minlength=len(segments)).astype(np.int64)
    indptr = np.zeros(len(segments) + 1, dtype=np.int64)
    np.cumsum(kept_len, out=indptr[1:])
    for s in stopwords():
        vocab.pop(s, None)  # a stop word in a query then simply finds no term
    return Corpus(segments=segments, ids=ids[keep], indptr=indptr, vocab=vocab)
