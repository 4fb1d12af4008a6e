"""Coarse retrieval (§4.2): segmentation invariants, BM25 engines vs rank-bm25, index cache."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sanctuary_local.errors import UserError
from sanctuary_local.records import Document
from sanctuary_local.retrieval.bm25 import ENGINES, index_cache_path, load_cached, make_engine, save_cached, top_k
from sanctuary_local.retrieval.segment import (
    build_corpus,
    segment_document,
    term_hash_reference,
    term_hashes,
    tokenize,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def synthetic_claim() -> tuple[list[Document], list[str]]:
    """A small seeded synthetic claim (shape of the real store at 2 % scale) and its queries."""
    from tests.support import synthetic_store as syn

    rng = np.random.default_rng(3)
    vocab = syn.vocabulary(rng, 8000)
    raw = syn.claim_documents(rng, vocab, 0, 0.02)[:300]
    docs = [Document(0, i, d["url"], tuple(d["url2text"])) for i, d in enumerate(raw)]
    queries = [q["question"] + " " + " ".join(q["answers"]) for q in syn.claim_queries(rng, raw, 0, 12)]
    return docs, queries


text_st = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=400)


@settings(max_examples=80, deadline=None)
@given(lines=st.lists(text_st, max_size=6), n=st.integers(1, 12))
def test_segments_reconstruct_and_tile(lines: list[str], n: int) -> None:
    doc = Document(0, 0, "u", tuple(lines))
    segs = segment_document(doc, n)
    text = doc.text
    for a, b in zip(segs, segs[1:]):
        assert a.end == b.start  # zero overlap, no gap
    for s in segs:
        assert 1 <= s.n_tokens <= n
        assert s.n_tokens == len(__import__("re").findall(r"\w+", text[s.start : s.end]))
    # every word token of the document lies in exactly one segment
    assert sum(s.n_tokens for s in segs) == len(__import__("re").findall(r"\w+", text))


def _regex_segments(text: str, n: int) -> list[tuple[int, int, int]]:
    """Independent definition of the segmentation: ≤ n ``\\w+`` tokens with their leading separators."""
    import re

    return [(m.start(), m.end(), len(re.findall(r"\w+", m.group()))) for m in re.finditer(rf"(?:\W*\w+){{1,{n}}}", text)]


@settings(max_examples=60, deadline=None)
@given(docs=st.lists(st.lists(text_st, max_size=4), max_size=5), n=st.integers(1, 9))
def test_build_corpus_segments_equal_regex_definition(docs: list[list[str]], n: int) -> None:
    documents = [Document(0, i, f"u{i}", tuple(lines)) for i, lines in enumerate(docs)]
    corpus = build_corpus(documents, n, token_ids=True)
    expected = [(d.position, *span) for d in documents for span in _regex_segments(d.text, n)]
    assert [(s.doc_position, s.start, s.end, s.n_tokens) for s in corpus.segments] == expected
    assert [s for d in documents for s in segment_document(d, n)] == corpus.segments
    assert corpus.doc_tokens == {d.position: len(__import__("re").findall(r"\w+", d.text)) for d in documents}
    # BM25 lengths and postings agree with the per-segment term lists
    for k, ids in enumerate(corpus.token_lists()):
        s = corpus.segments[k]
        terms = tokenize(documents[s.doc_position].text[s.start : s.end])
        assert corpus.lengths[k] == len(terms) == len(ids)
    tf = {}
    for t in range(corpus.n_terms):
        for a in range(corpus.indptr[t], corpus.indptr[t + 1]):
            tf[(int(corpus.rows[a]), t)] = int(corpus.tf[a])
    counted: dict = {}
    for k, ids in enumerate(corpus.token_lists()):
        for t in ids.tolist():
            counted[(k, t)] = counted.get((k, t), 0) + 1
    assert tf == counted


def test_word_table_is_regex_w_on_every_code_point() -> None:
    import re

    from sanctuary_local.retrieval.segment import _tables

    word, _ = _tables()
    rx = re.compile(r"\w")
    assert [c for c in range(0x110000) if bool(rx.match(chr(c))) != bool(word[c])] == []


@settings(max_examples=200, deadline=None)
@given(text=text_st)
def test_vectorised_hash_equals_reference(text: str) -> None:
    import re

    from sanctuary_local.retrieval.segment import _lower_map

    words = [w.translate(_lower_map()) for w in re.findall(r"\w+", text)]
    assert term_hashes(text).tolist() == [term_hash_reference(w) for w in words]


def test_hash_is_case_folded_and_position_free() -> None:
    h = term_hashes("Paris  PARIS paris, Pari parisx İstanbul")
    assert h[0] == h[1] == h[2] and len({h[2], h[3], h[4]}) == 3
    assert h[5] == term_hash_reference("istanbul")  # simple lower-case mapping of İ is i
    assert tokenize("The Eiffel tower is IN Paris") == ["eiffel", "tower", "paris"]


def test_corpus_matches_per_segment_tokenisation(synthetic_claim) -> None:
    docs, _ = synthetic_claim
    corpus = build_corpus(docs, 50, token_ids=True)
    for k in range(0, len(corpus.segments), 97):
        s = corpus.segments[k]
        text = docs[s.doc_position].text[s.start : s.end]
        keys = np.array([term_hash_reference(t) for t in tokenize(text)], dtype=np.uint64)
        assert corpus.token_lists()[k].tolist() == corpus.keys_to_ids(keys).tolist()
        assert (corpus.token_lists()[k] >= 0).all()


def _overlap(a: np.ndarray, b: np.ndarray) -> float:
    return len(set(a.tolist()) & set(b.tolist())) / max(1, len(b))


@pytest.mark.parametrize("engine", ["sparse", "bm25s"])
def test_engine_top125_overlaps_rank_bm25(engine: str, synthetic_claim) -> None:
    docs, queries = synthetic_claim
    corpus = build_corpus(docs, 100, token_ids=True)
    assert len(corpus.segments) > 300  # k = 125 must be a real cut
    ref, eng = make_engine("rank_bm25"), make_engine(engine)
    ref.index(corpus)
    eng.index(corpus)
    overlaps = []
    for q in queries:
        ids = corpus.query_ids(q)
        overlaps.append(_overlap(eng.search(ids, 125)[0], ref.search(ids, 125)[0]))
    # sparse implements rank-bm25's exact formula; bm25s's Robertson idf clamps common
    # terms to 0 instead of rank-bm25's ε floor, so it is only required to be close.
    assert np.mean(overlaps) >= (0.99 if engine == "sparse" else 0.5)


def test_sparse_scores_equal_rank_bm25(synthetic_claim) -> None:
    docs, queries = synthetic_claim
    corpus = build_corpus(docs[:60], 100, token_ids=True)
    ref, eng = make_engine("rank_bm25"), make_engine("sparse")
    ref.index(corpus)
    eng.index(corpus)
    for q in queries[:4]:
        ids = corpus.query_ids(q)
        np.testing.assert_allclose(eng.scores(ids), ref.scores(ids), rtol=1e-4, atol=1e-4)


def test_surrogate_overlap_with_reference(surrogate_store: Path, dev_claims_path: Path) -> None:
    from sanctuary_local.io.claims import read_claims
    from sanctuary_local.io.store import KnowledgeStore

    store, claims = KnowledgeStore(surrogate_store), read_claims(dev_claims_path)[:20]
    overlaps = []
    for c in claims:
        corpus = build_corpus(store.load(c.index).documents, 40, token_ids=True)  # small segments → k is a real cut
        ref, eng = make_engine("rank_bm25"), make_engine("sparse")
        ref.index(corpus)
        eng.index(corpus)
        for q in c.gold_questions:
            ids = corpus.query_ids(" ".join([q.question, *(a.answer for a in q.answers)]))
            overlaps.append(_overlap(eng.search(ids, 125)[0], ref.search(ids, 125)[0]))
    assert overlaps and np.mean(overlaps) >= 0.95


def test_top_k_sorted_positive_deterministic() -> None:
    scores = np.array([0.0, 2.0, 1.0, 2.0, -1.0, 3.0])
    idx, sc = top_k(scores, 3)
    assert idx.tolist() == [5, 1, 3] and sc.tolist() == [3.0, 2.0, 2.0]
    assert top_k(scores, 10)[0].tolist() == [5, 1, 3, 2]


def test_unknown_engine_and_empty_corpus() -> None:
    with pytest.raises(UserError, match="valid: bm25s, rank_bm25, sparse"):
        make_engine("nope")
    assert set(ENGINES) == {"sparse", "bm25s", "rank_bm25"}
    empty = build_corpus([Document(0, 0, "u", ()), Document(0, 1, "v", ("!!! ...",))], token_ids=True)
    for name in ENGINES:
        e = make_engine(name)
        e.index(empty)
        assert e.search(np.array([0], dtype=np.int32), 5)[0].size == 0


def test_index_cache_key_and_roundtrip(tmp_path: Path, synthetic_claim) -> None:
    docs, queries = synthetic_claim
    p = index_cache_path(tmp_path, "sha-a", "sparse", 1.5, 0.75, 500)
    assert p != index_cache_path(tmp_path, "sha-b", "sparse", 1.5, 0.75, 500)  # changed store
    assert p != index_cache_path(tmp_path, "sha-a", "sparse", 1.2, 0.75, 500)  # changed parameter
    assert p != index_cache_path(tmp_path, "sha-a", "sparse", 1.5, 0.75, 400)
    assert p != index_cache_path(tmp_path, "sha-a", "bm25s", 1.5, 0.75, 500)
    assert load_cached(p) is None
    corpus = build_corpus(docs[:50], 500)
    eng = make_engine("sparse")
    eng.index(corpus)
    save_cached(p, corpus, eng)
    corpus2, eng2 = load_cached(p)
    ids = corpus.query_ids(queries[0])
    assert corpus2.segments == corpus.segments
    np.testing.assert_array_equal(eng2.scores(ids), eng.scores(ids))
    p.write_bytes(b"torn")
    assert load_cached(p) is None  # unreadable cache is rebuilt, never trusted


@settings(max_examples=40, deadline=None)
@given(docs=st.lists(st.lists(text_st, max_size=4), min_size=1, max_size=4), n=st.integers(1, 7))
def test_small_blocks_and_split_documents_change_nothing(docs: list[list[str]], n: int) -> None:
    """Many blocks and huge documents cut into pieces give the same corpus as one block."""
    from sanctuary_local.retrieval import segment

    documents = [Document(0, i, f"u{i}", tuple(lines)) for i, lines in enumerate(docs)]
    whole = build_corpus(documents, n, token_ids=True)
    text = "\n".join(d.text for d in documents)
    hashes = term_hashes(text)
    saved = segment._BLOCK_CHARS
    segment._BLOCK_CHARS = 5  # every document its own block; anything over 10 chars is split
    try:
        split = build_corpus(documents, n, token_ids=True)
        split_hashes = term_hashes(text)
    finally:
        segment._BLOCK_CHARS = saved
    assert split_hashes.tolist() == hashes.tolist()
    assert split.segments == whole.segments and split.doc_tokens == whole.doc_tokens
    for name in ("lengths", "vocab", "indptr", "rows", "tf", "ids", "tok_indptr"):
        np.testing.assert_array_equal(getattr(split, name), getattr(whole, name))
