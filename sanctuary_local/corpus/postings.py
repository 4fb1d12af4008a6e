"""Units → segments → BM25 postings on disk, in bounded memory (an external sort).

Segmentation is the pipeline's own (``retrieval/segment.py``): a unit is cut into
zero-overlap segments of ``segment_tokens`` word tokens, the first starting at the unit's
start, each next one at the end of the previous one's last token, so ``text[start:end]``
is the segment and segments are contiguous. Terms are the same 64-bit hashes, stop words
dropped, so a query is tokenised exactly as a per-claim index tokenises it.

Postings are built by bucketing (term hash, segment, tf) records on the hash's top bits
into spill files while the units stream by; each bucket is then sorted on its own, so
memory is bounded by one bucket, not by the corpus. A unit's tokens are counted per
(term, segment) before they are spilled: a term has at most one record per segment, so a
frequent term's bucket holds ≤ one record per segment, not one per occurrence (spilling
raw pairs, the bucket of the synthetic corpus's most frequent word held 15 % of all
pairs at a million segments, and sorting it took 3 GB). Buckets are visited in hash
order, so the concatenated terms are globally sorted (``vocab``) and a query term is
found with one binary search over the memory-mapped array.

Weights are BM25 Okapi/ATIRE exactly as ``retrieval.bm25.SparseBM25`` computes them
(rank-bm25's ε floor for negative idf included), precomputed per posting, so a query is a
sum of memory-mapped weights (Lù 2024, bm25s's "eager" scoring).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sanctuary_local.retrieval.bm25 import EPSILON
from sanctuary_local.retrieval.segment import _is_stop, _tokenize_block

__all__ = ["PostingsWriter", "segment_spans", "POSTINGS_FILES"]

_PAIR = np.dtype([("h", "<u8"), ("s", "<u4"), ("tf", "<u4")])
#: Hash bits that pick a spill bucket (64 buckets).
_BUCKET_BITS = 6
#: Pairs held before they are spilled to the bucket files.
_FLUSH_PAIRS = 4_000_000
#: The arrays of a built index, memory-mapped at query time.
POSTINGS_FILES = ("vocab", "indptr", "post_seg", "post_w", "seg_unit", "seg_start", "seg_end", "seg_ntok")


def segment_spans(ends: np.ndarray, n_tokens: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, end, tokens) of each segment of a text whose tokens end at ``ends``."""
    count = len(ends)
    n_seg = -(-count // n_tokens)
    first = np.arange(n_seg, dtype=np.int64) * n_tokens
    last = np.minimum(first + n_tokens, count) - 1
    start = np.where(first == 0, 0, ends[np.maximum(first - 1, 0)]) if n_seg else np.zeros(0, np.int64)
    return start.astype(np.int64), ends[last].astype(np.int64), (last - first + 1).astype(np.int32)


class PostingsWriter:
    """Collects units' segments and term pairs, then writes the index arrays to ``gen``."""

    def __init__(self, gen: Path, segment_tokens: int, k1: float, b: float) -> None:
        if segment_tokens < 1:
            raise ValueError(f"segment_tokens must be ≥ 1, got {segment_tokens}")
        self.gen, self.n_tokens, self.k1, self.b = Path(gen), segment_tokens, float(k1), float(b)
        self.spill = self.gen / "spill"
        self.spill.mkdir(parents=True, exist_ok=True)
        self.seg_parts: list[tuple[np.ndarray, ...]] = []
        self.lengths: list[np.ndarray] = []
        self.pending: list[np.ndarray] = []
        self.n_pending = 0
        self.n_segments = 0

    def add(self, unit: int, text: str) -> int:
        """Segment one unit and queue its pairs; returns its number of segments."""
        starts, ends, h = _tokenize_block(text)
        start, end, ntok = segment_spans(ends, self.n_tokens)
        n = len(start)
        if not n:
            return 0
        self.seg_parts.append((np.full(n, unit, dtype=np.int32), start, end, ntok))
        tok_seg = np.repeat(np.arange(self.n_segments, self.n_segments + n, dtype=np.uint32), ntok)
        keep = ~_is_stop(h)
        self.lengths.append(np.bincount((tok_seg[keep] - self.n_segments).astype(np.intp), minlength=n))
        self.pending.append(_term_counts(h[keep], tok_seg[keep]))
        self.n_pending += len(self.pending[-1])
        self.n_segments += n
        if self.n_pending >= _FLUSH_PAIRS:
            self._flush()
        return n

    def _flush(self) -> None:
        if not self.pending:
            return
        pairs = np.concatenate(self.pending)
        self.pending, self.n_pending = [], 0
        bucket = (pairs["h"] >> np.uint64(64 - _BUCKET_BITS)).astype(np.intp)
        order = np.argsort(bucket, kind="stable")
        pairs, bucket = pairs[order], bucket[order]
        bounds = np.searchsorted(bucket, np.arange((1 << _BUCKET_BITS) + 1))
        for i in range(1 << _BUCKET_BITS):
            if bounds[i] < bounds[i + 1]:
                with open(self.spill / f"b{i:02d}.bin", "ab") as fh:
                    pairs[bounds[i]:bounds[i + 1]].tofile(fh)

    def _bucket(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Bucket ``i`` sorted: (terms, postings per term, segment per posting, tf)."""
        return _sorted_bucket(self.spill / f"b{i:02d}.bin")

    def finish(self) -> dict[str, int]:
        """Write the arrays (``POSTINGS_FILES``) as ``.npy`` into ``gen``; returns counts."""
        self._flush()
        n = self.n_segments
        lengths = np.concatenate(self.lengths).astype(np.float64) if self.lengths else np.zeros(0)
        if self.seg_parts:
            parts = [np.concatenate(col) for col in zip(*self.seg_parts)]
        else:
            parts = [np.zeros(0, dt) for dt in (np.int32, np.int64, np.int64, np.int32)]
        for name, arr in zip(("seg_unit", "seg_start", "seg_end", "seg_ntok"), parts):
            np.save(self.gen / f"{name}.npy", arr)
        # pass 1: document frequencies (the ε floor needs the mean idf over all terms)
        n_terms, n_post, idf_sum = 0, 0, 0.0
        for i in range(1 << _BUCKET_BITS):
            terms, df, _, _ = self._bucket(i)
            n_terms += len(terms)
            n_post += int(df.sum())
            idf_sum += float((np.log(n - df + 0.5) - np.log(df + 0.5)).sum()) if len(df) else 0.0
        mean_idf = idf_sum / n_terms if n_terms else 0.0
        floor = EPSILON * mean_idf if mean_idf > 0 else EPSILON
        avgdl = lengths.mean() if n and lengths.mean() > 0 else 1.0
        norm = self.k1 * (1 - self.b + self.b * lengths / avgdl)
        vocab = _memmap(self.gen / "vocab.npy", "w+", np.uint64, (n_terms,))
        indptr = _memmap(self.gen / "indptr.npy", "w+", np.int64, (n_terms + 1,))
        post_seg = _memmap(self.gen / "post_seg.npy", "w+", np.int32, (n_post,))
        post_w = _memmap(self.gen / "post_w.npy", "w+", np.float32, (n_post,))
        t0 = p0 = 0
        indptr[0] = 0
        # pass 2: weights, written bucket after bucket (hash order = sorted vocab)
        for i in range(1 << _BUCKET_BITS):
            terms, df, seg, tf = self._bucket(i)
            if not len(terms):
                continue
            idf = np.log(n - df + 0.5) - np.log(df + 0.5)
            idf[idf < 0] = floor
            tfd = tf.astype(np.float64)
            w = np.repeat(idf, df) * tfd * (self.k1 + 1) / (tfd + norm[seg])
            vocab[t0:t0 + len(terms)] = terms
            indptr[t0 + 1:t0 + len(terms) + 1] = p0 + np.cumsum(df)
            post_seg[p0:p0 + len(seg)] = seg
            post_w[p0:p0 + len(seg)] = w.astype(np.float32)
            t0, p0 = t0 + len(terms), p0 + len(seg)
        for arr in (a for a in (vocab, indptr, post_seg, post_w) if isinstance(a, np.memmap)):
            arr.flush()
        del vocab, indptr, post_seg, post_w
        for f in self.spill.iterdir():
            f.unlink()
        self.spill.rmdir()
        return {"segments": n, "terms": n_terms, "postings": n_post}


def _term_counts(h: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """One record per distinct (term, segment) of a unit's tokens, with its count (tf)."""
    order = np.lexsort((h, seg))
    h, seg = h[order], seg[order]
    new = np.ones(len(h), dtype=bool)
    new[1:] = (h[1:] != h[:-1]) | (seg[1:] != seg[:-1])
    at = np.flatnonzero(new)
    out = np.empty(len(at), dtype=_PAIR)
    out["h"], out["s"], out["tf"] = h[at], seg[at], np.diff(np.append(at, len(h)))
    return out


def _sorted_bucket(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A spilled bucket's (term hash, segment, tf) records sorted by term, then segment:
    (terms, postings per term, segment per posting, tf); empty arrays when the bucket was
    never written. A (term, segment) has one record: a segment lies in one unit, and a
    unit's records are counted before they are spilled (``_term_counts``)."""
    if not path.exists():
        z = np.zeros(0, np.int64)
        return z.astype(np.uint64), z, z.astype(np.int32), z.astype(np.int32)
    rec = np.fromfile(path, dtype=_PAIR)
    order = np.lexsort((rec["s"], rec["h"]))
    h, s, tf = rec["h"][order], rec["s"][order].astype(np.int32), rec["tf"][order].astype(np.int32)
    del rec, order
    new_term = np.ones(len(h), dtype=bool)
    new_term[1:] = h[1:] != h[:-1]
    t_at = np.flatnonzero(new_term)
    return h[t_at], np.diff(np.append(t_at, len(h))), s, tf


def _memmap(path: Path, mode: str, dtype: type, shape: tuple[int]) -> np.ndarray:
    """A new ``.npy`` array file opened memory-mapped (an empty one is written plainly:
    an empty file cannot be memory-mapped)."""
    if not shape[0]:
        np.save(path, np.zeros(shape, dtype))
        return np.zeros(shape, dtype)
    return np.lib.format.open_memmap(path, mode, dtype, shape)
