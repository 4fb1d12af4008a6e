"""Coarse BM25 retrieval over a claim's segments (SANCTUARY §4.2).

Engines sit behind one tiny interface (``index(corpus)``, ``search(query_ids, k)``) and
are chosen by name from ``ENGINES``:

- ``sparse``  — our vectorised scipy implementation of BM25 *Okapi/ATIRE as rank-bm25
  computes it* (Trotman et al., 2014): idf = ln((N − n + 0.5)/(n + 0.5)), negative idf
  floored at ε·mean(idf) with ε = 0.25 (kept positive when mean(idf) ≤ 0, tiny corpora),
  tf part tf(k1+1)/(tf + k1(1 − b + b·dl/avgdl)). Same scores as the reference up to
  float rounding on any corpus with mean(idf) > 0.
- ``bm25s``   — bm25s's "robertson" variant (negative idf clamped to 0 instead of the
  ε floor; ranks match except where a term occurs in > half of the segments).
- ``rank_bm25`` — the paper's/baseline's library, the reference (slow pure Python).

All engines score the same term ids (see ``segment.build_corpus``); a query term that
repeats counts once per repetition, as in rank-bm25. Only segments with a positive
score are returned (a segment sharing no term with the query is not a hit).

Built indexes are cached (pickle) under ``index_cache``; the file name hashes the
caller's content key (the store file's sha256), the tokeniser id, the engine and every
parameter, so a changed store or parameter never reuses a stale index.
"""

from __future__ import annotations

import hashlib
import pickle
from dataclasses import replace
from pathlib import Path
from typing import Protocol

import numpy as np

from sanctuary_local.errors import UserError
from sanctuary_local.io.leaderboard import atomic_write_bytes
from sanctuary_local.retrieval.segment import TOKENISER_ID, Corpus

__all__ = ["BM25Engine", "ENGINES", "make_engine", "top_k", "index_cache_path", "load_cached", "save_cached"]

#: rank-bm25's BM25Okapi default floor for negative idf, in units of the mean idf.
EPSILON = 0.25


def top_k(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices and scores of the ≤ k best positive scores, best first, ties by index.

    ``argpartition`` is O(n) where a full sort is O(n log n): n is ~30k segments per
    full-scale claim and k only 125.
    """
    positive = np.flatnonzero(scores > 0)
    if positive.size > k:
        part = np.argpartition(-scores[positive], k - 1)[:k]
        positive = positive[part]
    order = np.lexsort((positive, -scores[positive]))  # deterministic tie-break
    idx = positive[order]
    return idx, scores[idx]


class BM25Engine(Protocol):
    """A BM25 index over one claim's segments."""

    name: str
    needs_token_ids: bool

    def index(self, corpus: Corpus) -> None:
        """Build the index from the corpus's per-segment term ids."""

    def scores(self, query_ids: np.ndarray) -> np.ndarray:
        """BM25 score of every segment for one query (term ids, duplicates kept)."""

    def search(self, query_ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k segment indices and scores (positive only), best first."""


class _Base:
    name = "base"
    #: True when ``index`` reads per-segment term lists (build the corpus with ``token_ids=True``).
    needs_token_ids = False

    def __init__(self, k1: float = 1.5, b: float = 0.75) -> None:
        if k1 < 0 or not 0 <= b <= 1:
            raise UserError(f"invalid BM25 parameters k1={k1}, b={b} (need k1 ≥ 0, 0 ≤ b ≤ 1)")
        self.k1, self.b = float(k1), float(b)
        self.n_docs = 0

    def scores(self, query_ids: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def search(self, query_ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        if self.n_docs == 0 or len(query_ids) == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        return top_k(self.scores(query_ids), k)


class SparseBM25(_Base):
    """Vectorised Okapi/ATIRE BM25 on a scipy CSC matrix of per-term segment weights."""

    name = "sparse"

    def index(self, corpus: Corpus) -> None:
        from scipy import sparse

        n, lengths = len(corpus.segments), corpus.lengths
        self.n_docs = n
        if n == 0 or corpus.tf.size == 0:
            self.n_docs, self.matrix = 0, None
            return
        df = np.diff(corpus.indptr).astype(np.float64)
        idf = np.log(n - df + 0.5) - np.log(df + 0.5)
        mean_idf = idf.mean()
        # rank-bm25's floor ε·mean(idf); one deviation: in tiny corpora (e.g. one segment)
        # the mean is ≤ 0 and rank-bm25 scores every match negatively (= no hit), so the
        # floor is kept positive there.
        idf[idf < 0] = EPSILON * mean_idf if mean_idf > 0 else EPSILON
        dl = lengths.astype(np.float64)
        avgdl = dl.mean() if dl.mean() > 0 else 1.0
        norm = self.k1 * (1 - self.b + self.b * dl / avgdl)
        tf = corpus.tf.astype(np.float64)
        term = np.repeat(np.arange(len(df)), np.diff(corpus.indptr))
        data = (idf[term] * tf * (self.k1 + 1) / (tf + norm[corpus.rows])).astype(np.float32)
        self.matrix = sparse.csc_matrix((data, corpus.rows, corpus.indptr), shape=(n, len(df)))

    def scores(self, query_ids: np.ndarray) -> np.ndarray:
        terms, counts = np.unique(np.asarray(query_ids, dtype=np.int64), return_counts=True)
        return np.asarray(self.matrix[:, terms] @ counts.astype(np.float32)).ravel()


class Bm25sBM25(_Base):
    """bm25s (Lù, 2024) with the Robertson variant, fed our term ids."""

    name = "bm25s"
    needs_token_ids = True

    def index(self, corpus: Corpus) -> None:
        import bm25s

        self.n_docs = len(corpus.segments)
        if self.n_docs == 0 or corpus.tf.size == 0:
            self.n_docs = 0
            return
        self.model = bm25s.BM25(k1=self.k1, b=self.b, method="robertson")
        ids = [t.tolist() for t in corpus.token_lists()]
        self.model.index((ids, {i: i for i in range(corpus.n_terms)}), create_empty_token=False, show_progress=False)

    def scores(self, query_ids: np.ndarray) -> np.ndarray:
        return np.asarray(self.model.get_scores_from_ids(np.asarray(query_ids, dtype=np.int32).tolist()))


class RankBM25(_Base):
    """rank-bm25's BM25Okapi: the reference the paper and the FEVER-8 baseline use."""

    name = "rank_bm25"
    needs_token_ids = True

    def index(self, corpus: Corpus) -> None:
        from sanctuary_local.errors import require

        self.n_docs = len(corpus.segments)
        if self.n_docs == 0 or corpus.tf.size == 0:
            self.n_docs = 0
            return
        rank_bm25 = require("rank_bm25", "dev", "the reference BM25 engine 'rank_bm25'")
        self.model = rank_bm25.BM25Okapi([t.tolist() for t in corpus.token_lists()], k1=self.k1, b=self.b)

    def scores(self, query_ids: np.ndarray) -> np.ndarray:
        return np.asarray(self.model.get_scores(np.asarray(query_ids).tolist()), dtype=np.float64)


#: Engine name → class (house style: explicit table, unknown names are errors).
ENGINES: dict[str, type[_Base]] = {c.name: c for c in (SparseBM25, Bm25sBM25, RankBM25)}


def make_engine(name: str, k1: float = 1.5, b: float = 0.75) -> BM25Engine:
    """Instantiate an engine by name (``ENGINES``)."""
    if name not in ENGINES:
        raise UserError(f"unknown BM25 engine '{name}' (valid: {', '.join(sorted(ENGINES))})")
    return ENGINES[name](k1=k1, b=b)


def index_cache_path(cache_dir: str | Path, content_key: str, engine: str, k1: float, b: float, n_tokens: int) -> Path:
    """Cache file for one claim's index: hash of content key + tokeniser + every parameter."""
    key = f"{content_key}|{TOKENISER_ID}|{engine}|k1={k1!r}|b={b!r}|seg={n_tokens}|v1"
    return Path(cache_dir) / f"bm25-{hashlib.sha256(key.encode()).hexdigest()[:32]}.pkl"


def load_cached(path: Path) -> tuple[Corpus, BM25Engine] | None:
    """The cached (corpus, engine) or None when absent or unreadable (then it is rebuilt)."""
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
        return None


def save_cached(path: Path, corpus: Corpus, engine: BM25Engine) -> None:
    """Write atomically so a crashed or concurrent writer never leaves a torn index.

    The cached corpus keeps what querying needs (segments, vocabulary, per-document token
    counts); its postings and token lists are dropped because the built engine holds its
    own copy of them (this halves the file: ~110 MB for a full-scale claim).
    """
    slim = replace(corpus, rows=corpus.rows[:0], tf=corpus.tf[:0], ids=None, tok_indptr=None)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, pickle.dumps((slim, engine), protocol=pickle.HIGHEST_PROTOCOL))
