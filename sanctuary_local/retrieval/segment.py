"""Coarse segmentation (SANCTUARY §4.2) and the BM25 tokeniser, vectorised with numpy.

Definitions (they are what ``TOKENISER_ID`` names):

- A *token* is a maximal run of Unicode word characters, exactly regex ``\\w+`` on the
  original text (``str.isalnum()`` or ``_``, code point by code point).
- A *segment* is up to ``n_tokens`` such tokens, zero overlap. Its span starts at the
  separator characters that precede its first token and ends right after its last
  token, so consecutive segments of a document are contiguous
  (``seg[i].end == seg[i+1].start``) and ``document.text[start:end]`` is the segment.
- A BM25 *term* is a token lower-cased code point by code point (Unicode simple
  lower-case mapping: the first character of ``chr(c).lower()``), minus English stop
  words (bm25s's list). Terms are identified by a 64-bit polynomial hash of their code
  points (mixed with the length, then a splitmix64 finaliser); inside one claim's index
  the hash is truncated to ``64 − ⌈log2(segments + 1)⌉`` bits (48 up to 65,535
  segments, 44 up to ~1 M) so that a term and a segment pack into one integer. Two
  distinct terms that collide would share postings: for a claim with a million distinct
  terms the chance of any collision is about 2·10⁻³ with 48-bit keys, and BM25 is not
  affected beyond those two rare terms.

Why hashing: a full-scale claim holds ~100 M characters and ~23 M tokens. Python's
``re`` plus a ``dict`` vocabulary cost ~12 s there; this module works on the UTF-32 code
points of blocks of documents with numpy only (table look-ups, one prefix sum, one
``np.sort`` of packed (term, segment) keys) and takes a few seconds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Sequence

import numpy as np

from sanctuary_local.records import Document, Segment

__all__ = [
    "TOKENISER_ID",
    "Corpus",
    "segment_document",
    "build_corpus",
    "tokenize",
    "term_hashes",
    "term_hash_reference",
    "stopwords",
]

#: Identifies the tokenisation in index cache keys; bump it when tokenisation changes.
TOKENISER_ID = "w+-simplelower-stopen-polyhash64-v2"

_WORD = re.compile(r"\w+")
_MAX_CP = 0x110000
_U64 = np.uint64
_MASK64 = (1 << 64) - 1
#: Polynomial base (odd, so invertible mod 2^64) and its inverse.
_BASE = 0x100000001B3
_INV_BASE = pow(_BASE, -1, 1 << 64)
_LEN_MIX = 0x9E3779B97F4A7C15
#: Documents are tokenised in blocks of about this many characters (memory ~40 B/char).
_BLOCK_CHARS = 1 << 22


@lru_cache(maxsize=1)
def stopwords() -> frozenset[str]:
    """English stop words (bm25s's list, the one its default tokeniser uses)."""
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN)


@lru_cache(maxsize=1)
def _tables() -> tuple[np.ndarray, np.ndarray]:
    """Per-code-point look-up tables: is-word-character and simple lower-case code point."""
    word = np.fromiter((c == 95 or chr(c).isalnum() for c in range(_MAX_CP)), dtype=bool, count=_MAX_CP)
    lower = np.arange(_MAX_CP, dtype=_U64)  # 64-bit: the gather feeds the hash directly
    # only cased characters change; chr(c).lower() on the whole range would cost ~0.4 s
    for c in np.flatnonzero(word).tolist():
        lo = chr(c).lower()
        if lo != chr(c):
            lower[c] = ord(lo[0])
    return word, lower


@lru_cache(maxsize=1)
def _lower_map() -> dict[int, int]:
    """``str.translate`` table equivalent to the lower-case look-up table."""
    _, lower = _tables()
    changed = np.flatnonzero(lower != np.arange(_MAX_CP, dtype=_U64))
    return {int(c): int(lower[c]) for c in changed}


class _Powers:
    """B^i and B^-i mod 2^64 for i < n, grown on demand (shared by all calls in a process)."""

    pow = np.ones(1, dtype=_U64)
    inv = np.ones(1, dtype=_U64)

    @classmethod
    def get(cls, n: int) -> tuple[np.ndarray, np.ndarray]:
        if len(cls.pow) < n:
            size = max(n, 2 * len(cls.pow))
            for name, base in (("pow", _BASE), ("inv", _INV_BASE)):
                arr = np.full(size, base, dtype=_U64)
                arr[0] = 1
                np.multiply.accumulate(arr, out=arr)  # wraps mod 2^64
                setattr(cls, name, arr)
        return cls.pow[:n], cls.inv[:n]


def _mix(h: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Length-salted splitmix64 finaliser, in place (full avalanche: every bit usable)."""
    with np.errstate(over="ignore"):
        h += lengths.astype(_U64) * _U64(_LEN_MIX)
        h ^= h >> _U64(30)
        h *= _U64(0xBF58476D1CE4E5B9)
        h ^= h >> _U64(27)
        h *= _U64(0x94D049BB133111EB)
        h ^= h >> _U64(31)
    return h


_NON_WORD = re.compile(r"\W")


def _tokenize_block(text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Token start/end offsets (code points = ``str`` indices) and 64-bit term hashes.

    Text longer than two blocks (one huge document) is cut at a non-word character
    near every block boundary, so no token is split and memory stays bounded.
    """
    if len(text) <= 2 * _BLOCK_CHARS:
        return _tokenize_piece(text)
    parts, at = [], 0
    while at < len(text):
        m = _NON_WORD.search(text, at + _BLOCK_CHARS) if len(text) - at > 2 * _BLOCK_CHARS else None
        cut = m.start() + 1 if m else len(text)
        starts, ends, h = _tokenize_piece(text[at:cut])
        parts.append((starts + at, ends + at, h))
        at = cut
    return tuple(np.concatenate(p) for p in zip(*parts))  # type: ignore[return-value]


def _tokenize_piece(text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    word, lower = _tables()
    cp = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")
    n = len(cp)
    edge = np.zeros(n + 2, dtype=np.int8)
    edge[1:-1] = word[cp]
    step = edge[1:] - edge[:-1]
    starts = np.flatnonzero(step == 1)
    ends = np.flatnonzero(step == -1)
    pw, inv = _Powers.get(n)
    prefix = np.zeros(n + 1, dtype=_U64)
    with np.errstate(over="ignore"):
        lc = lower[cp]
        lc *= pw
        np.cumsum(lc, out=prefix[1:])
        h = (prefix[ends] - prefix[starts]) * inv[starts]
    return starts, ends, _mix(h, ends - starts)


def term_hashes(text: str) -> np.ndarray:
    """64-bit hashes of every token of ``text`` (stop words included), in order."""
    return _tokenize_block(text)[2]


def term_hash_reference(term: str) -> int:
    """The hash of one (already lower-cased) term, in plain Python: the specification."""
    h = 0
    p = 1
    for ch in term:
        h = (h + ord(ch) * p) & _MASK64
        p = (p * _BASE) & _MASK64
    h = (h + len(term) * _LEN_MIX) & _MASK64
    h ^= h >> 30
    h = (h * 0xBF58476D1CE4E5B9) & _MASK64
    h ^= h >> 27
    h = (h * 0x94D049BB133111EB) & _MASK64
    return h ^ (h >> 31)


def tokenize(text: str) -> list[str]:
    """BM25 terms of ``text`` as strings (reference and tests; the index uses hashes)."""
    stop, table = stopwords(), _lower_map()
    return [t for t in (w.translate(table) for w in _WORD.findall(text)) if t not in stop]


@lru_cache(maxsize=1)
def _stop_filter() -> tuple[int, np.ndarray, np.ndarray]:
    """Exact stop-hash test by table look-up: (shift, slot table, stop hash per slot)."""
    hashes = np.array(sorted(term_hash_reference(s) for s in stopwords()), dtype=_U64)
    for shift in range(0, 64 - 20, 4):
        slots = (hashes >> _U64(shift)) & _U64((1 << 20) - 1)
        if len(np.unique(slots)) == len(slots):  # no two stop words share a slot
            table = np.zeros(1 << 20, dtype=np.uint16)
            table[slots] = np.arange(1, len(hashes) + 1)
            return shift, table, np.concatenate([np.zeros(1, _U64), hashes])
    raise AssertionError("no collision-free slot window for the stop-word hashes")  # pragma: no cover


def _is_stop(h: np.ndarray) -> np.ndarray:
    shift, table, stop = _stop_filter()
    slot = table[((h >> _U64(shift)) & _U64((1 << 20) - 1)).astype(np.intp)]
    return (slot > 0) & (stop[slot] == h)


def segment_document(doc: Document, n_tokens: int = 500, text: str | None = None) -> list[Segment]:
    """Cut ``doc`` (or ``text`` in its place) into zero-overlap segments of ≤ ``n_tokens``
    word tokens with exact spans: ``build_corpus`` on one document."""
    if text is not None:
        doc = Document(doc.claim_index, doc.position, doc.url, (text,))
    return build_corpus([doc], n_tokens).segments


@dataclass
class Corpus:
    """A claim's segments and their BM25 postings.

    Terms are the sorted truncated hashes in ``vocab``; the postings of term ``t`` are
    ``rows[indptr[t]:indptr[t+1]]`` (segment indices, increasing) with term frequencies
    ``tf`` at the same places — a CSC matrix segment × term. ``ids``/``tok_indptr`` (the
    per-segment term ids in text order) exist only when built with ``token_ids=True``:
    the reference engines need them, the default ``sparse`` engine does not.
    """

    segments: list[Segment]
    lengths: np.ndarray  # int64 BM25 length (terms after stop-word removal) per segment
    vocab: np.ndarray  # uint64, sorted unique term keys (hash >> shift)
    shift: int
    indptr: np.ndarray  # int64, len(vocab) + 1
    rows: np.ndarray  # int32 segment index per posting
    tf: np.ndarray  # int32 term frequency per posting
    doc_tokens: dict[int, int] = field(default_factory=dict)  # document position → word tokens
    ids: np.ndarray | None = None
    tok_indptr: np.ndarray | None = None

    @property
    def n_terms(self) -> int:
        return len(self.vocab)

    def token_lists(self) -> list[np.ndarray]:
        """Per-segment term-id arrays in text order (views; needs ``token_ids=True``)."""
        if self.ids is None or self.tok_indptr is None:
            raise ValueError("corpus built without token_ids=True: per-segment term lists are unavailable")
        ptr = self.tok_indptr
        return [self.ids[a:b] for a, b in zip(ptr[:-1], ptr[1:])]

    def keys_to_ids(self, h: np.ndarray) -> np.ndarray:
        """Term ids of full 64-bit hashes; -1 where the term is not in the corpus."""
        if not len(self.vocab):
            return np.full(len(h), -1, dtype=np.int64)
        key = h >> _U64(self.shift)
        pos = np.minimum(np.searchsorted(self.vocab, key), len(self.vocab) - 1)
        return np.where(self.vocab[pos] == key, pos, -1)

    def query_ids(self, text: str) -> np.ndarray:
        """Term ids of a query (duplicates kept, as rank-bm25 scores them; unknown terms dropped)."""
        h = term_hashes(text)
        ids = self.keys_to_ids(h[~_is_stop(h)])
        return ids[ids >= 0].astype(np.int32)


def _blocks(documents: Sequence[Document]) -> list[list[Document]]:
    out: list[list[Document]] = [[]]
    size = 0
    for d in documents:
        n = sum(map(len, d.lines)) + len(d.lines)
        if out[-1] and size + n > _BLOCK_CHARS:
            out.append([])
            size = 0
        out[-1].append(d)
        size += n
    return out if out[0] else []


def build_corpus(documents: Sequence[Document], n_tokens: int = 500, *, token_ids: bool = False) -> Corpus:
    """Segment every document and build the BM25 postings in a few vectorised passes."""
    if n_tokens < 1:
        raise ValueError(f"n_tokens must be ≥ 1, got {n_tokens}")
    seg_parts: list[tuple[np.ndarray, ...]] = []
    hash_parts: list[np.ndarray] = []
    len_parts: list[np.ndarray] = []
    segof_parts: list[np.ndarray] = []
    doc_tokens: dict[int, int] = {}
    n_seg = 0
    for block in _blocks(documents):
        texts = [d.text for d in block]
        lens = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
        doc_at = np.zeros(len(texts), dtype=np.int64)
        np.cumsum(lens[:-1] + 1, out=doc_at[1:])  # documents joined with one "\n" (not a word char)
        starts, ends, h = _tokenize_block("\n".join(texts))
        tok_doc = np.searchsorted(doc_at, starts, side="right") - 1
        count = np.bincount(tok_doc, minlength=len(texts))
        first_tok = np.zeros(len(texts), dtype=np.int64)
        np.cumsum(count[:-1], out=first_tok[1:])
        doc_tokens.update(zip((d.position for d in block), count.tolist()))
        # segments: doc d has ceil(count/n) of them; segment j holds its tokens [j·n, (j+1)·n)
        segs_per_doc = -(-count // n_tokens)
        seg_doc = np.repeat(np.arange(len(texts)), segs_per_doc)
        seg_first_local = np.arange(len(seg_doc)) - np.repeat(np.cumsum(segs_per_doc) - segs_per_doc, segs_per_doc)
        g0 = first_tok[seg_doc] + seg_first_local * n_tokens
        g1 = np.minimum(g0 + n_tokens, first_tok[seg_doc] + count[seg_doc]) - 1
        base = doc_at[seg_doc]
        seg_start = np.where(seg_first_local == 0, base, ends[np.maximum(g0 - 1, 0)]) - base
        seg_parts.append((seg_doc, seg_start, ends[g1] - base, g1 - g0 + 1, block))
        # every token's segment, then drop stop words
        tok_seg = np.repeat(np.arange(n_seg, n_seg + len(seg_doc), dtype=_U64), g1 - g0 + 1)
        keep = ~_is_stop(h)
        h, tok_seg = h[keep], tok_seg[keep]
        len_parts.append(np.bincount((tok_seg - _U64(n_seg)).astype(np.intp), minlength=len(seg_doc)))
        hash_parts.append(h)
        segof_parts.append(tok_seg)
        n_seg += len(seg_doc)
    segments: list[Segment] = []
    for seg_doc, s, e, c, block in seg_parts:
        pos = [(block[i].claim_index, block[i].position) for i in seg_doc.tolist()]
        segments.extend(Segment(ci, p, a, b, k) for (ci, p), a, b, k in zip(pos, s.tolist(), e.tolist(), c.tolist()))
    seg_bits = max(1, int(n_seg).bit_length())
    shift = _U64(seg_bits)
    # one sort of packed (term key, segment) integers gives postings grouped by term,
    # segments increasing inside each term, and equal pairs adjacent (their run = tf)
    packed = np.concatenate(hash_parts) if hash_parts else np.zeros(0, _U64)
    del hash_parts
    packed >>= shift
    if token_ids:
        term_of_token = packed.copy()
    packed <<= shift
    packed |= np.concatenate(segof_parts) if segof_parts else np.zeros(0, _U64)
    del segof_parts
    packed.sort()
    new_pair = np.empty(len(packed), dtype=bool)
    new_pair[:1] = True
    np.not_equal(packed[1:], packed[:-1], out=new_pair[1:])
    pair_start = np.flatnonzero(new_pair)
    del new_pair
    tf = np.empty(len(pair_start), dtype=np.int32)
    tf[:-1] = np.diff(pair_start)
    tf[-1:] = len(packed) - pair_start[-1:]
    pairs = packed[pair_start]
    del packed, pair_start
    rows = (pairs & _U64((1 << seg_bits) - 1)).astype(np.int32)
    pairs >>= shift
    new_term = np.empty(len(pairs), dtype=bool)
    new_term[:1] = True
    np.not_equal(pairs[1:], pairs[:-1], out=new_term[1:])
    term_start = np.flatnonzero(new_term)
    lengths = np.concatenate(len_parts).astype(np.int64) if len_parts else np.zeros(0, np.int64)
    corpus = Corpus(
        segments=segments,
        lengths=lengths,
        vocab=pairs[term_start],
        shift=seg_bits,
        indptr=np.append(term_start, len(pairs)).astype(np.int64),
        rows=rows,
        tf=tf,
        doc_tokens=doc_tokens,
    )
    if token_ids:
        corpus.ids = np.searchsorted(corpus.vocab, term_of_token).astype(np.int32)
        corpus.tok_indptr = np.concatenate([[0], np.cumsum(corpus.lengths)]).astype(np.int64)
    return corpus
