"""Stage 2 end to end with the real packaged MiniLM, real BM25 and real FAISS (CPU).

Small coarse settings (top-3 segments of 60 tokens) keep the semantic stage to a few
seconds per claim on 2 shared cores; the maths is the same as with the paper's values.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from sanctuary_local.config.settings import RetrievalConfig, load_config
from sanctuary_local.errors import MissingModel
from sanctuary_local.records import ClaimEvidence, Document, HydeResult, Query
from sanctuary_local.stages.evidence import EvidenceRetriever, run_retrieval


@pytest.fixture(scope="session")
def small_cfg() -> RetrievalConfig:
    cfg = load_config("cpu").retrieval
    cfg.top_k_segments, cfg.segment_tokens, cfg.index_cache = 3, 60, ""
    return cfg


@pytest.fixture(scope="session")
def retriever(small_cfg: RetrievalConfig) -> EvidenceRetriever:
    return EvidenceRetriever(small_cfg)


def gold_hyde(claims) -> list[HydeResult]:
    return [
        HydeResult(c.index, None, tuple(
            Query(c.index, n, q.question, tuple(a.scored_text() for a in q.answers)) for n, q in enumerate(c.gold_questions)
        ))
        for c in claims
    ]


def check_snippets(ev: ClaimEvidence, docs: dict[int, Document], cfg: RetrievalConfig) -> int:
    n = 0
    for qe in ev.queries:
        assert len(qe.snippets) <= cfg.max_snippets
        scores = [s.score for s in qe.snippets]
        assert scores == sorted(scores, reverse=True)
        for s in qe.snippets:
            c, d = s.chunk, docs[s.chunk.doc_position]
            assert c.claim_index == ev.claim_index and c.url == d.url
            assert d.text[c.start : c.end] == c.text and c.text.strip() == c.text and c.text
            assert s.score >= cfg.retriever.similarity_threshold
            n += 1
    return n


def test_surrogate_run_provenance_every_snippet(surrogate_store: Path, dev_claims_path: Path, small_cfg) -> None:
    from sanctuary_local.io.claims import read_claims
    from sanctuary_local.io.store import KnowledgeStore

    claims = read_claims(dev_claims_path)[:4]
    seen: list[int] = []
    results = run_retrieval(surrogate_store, gold_hyde(claims), small_cfg, workers=1, on_result=lambda e: seen.append(e.claim_index))
    assert [r.claim_index for r in results] == [c.index for c in claims] and sorted(seen) == sorted(r.claim_index for r in results)
    store = KnowledgeStore(surrogate_store)
    total = 0
    for ev in results:
        assert not any(f.startswith("retrieval_error") for f in ev.flags), ev.flags
        total += check_snippets(ev, {d.position: d for d in store.load(ev.claim_index).documents}, small_cfg)
        assert {"segment", "index", "bm25", "chunk", "embed", "faiss", "total", "load"} <= set(ev.timings)
    assert total >= len(claims)  # the run really produced evidence


def test_deterministic_and_cached(surrogate_store: Path, dev_claims_path: Path, retriever, tmp_path: Path) -> None:
    from sanctuary_local.io.claims import read_claims
    from sanctuary_local.io.store import KnowledgeStore

    claim = read_claims(dev_claims_path)[1]
    docs = KnowledgeStore(surrogate_store).load(1).documents
    queries = gold_hyde([claim])[0].queries
    cached = EvidenceRetriever.__new__(EvidenceRetriever)
    cached.__dict__.update(retriever.__dict__)
    cached.cfg = replace(retriever.cfg, index_cache=str(tmp_path / "indexes"))
    first = cached.retrieve(docs, queries, cache_key="sha-1")
    second = cached.retrieve(docs, queries, cache_key="sha-1")
    assert "index" in first.timings and "index" not in second.timings and "index_cache_load" in second.timings
    assert first.queries == second.queries and first.flags == second.flags
    other = cached.retrieve(docs, queries, cache_key="sha-2")  # changed store → rebuilt
    assert "index" in other.timings and other.queries == first.queries
    assert retriever.retrieve(docs, queries).queries == first.queries


def test_bad_content_never_raises(retriever) -> None:
    q = (Query(5, 0, "Who won the election?", ("Someone won it.",)), Query(5, 1, "zzzqqq xxyyzz?", ()))
    none = retriever.retrieve([], q)
    assert none.claim_index == 5 and "no_documents" in none.flags and all(not x.snippets for x in none.queries)
    empty = retriever.retrieve([Document(5, 0, "u", ()), Document(5, 1, "v", ("", "  ", "!!!"))], q)
    assert "empty_documents:2" in empty.flags and "no_hits:q0" in empty.flags
    docs = [Document(5, 0, "https://a.example", ("The election was won by the incumbent mayor in 2020.",) * 3)]
    hits = retriever.retrieve(docs, q)
    assert "no_hits:q1" in hits.flags and "no_hits:q0" not in hits.flags
    assert not hits.queries[1].snippets
    assert retriever.retrieve(docs, ()).flags == ("no_queries",)


def test_store_problems_missing_and_non_utf8(tmp_path: Path, small_cfg) -> None:
    store = tmp_path / "store"
    store.mkdir()
    good = b'{"url": "https://x.example", "url2text": ["The mayor won the 2020 election by a wide margin."]}\n'
    (store / "0.json").write_bytes(good + b'{"url": "https://y.example", "url2text": ["caf\xe9 \xff\xfe bad bytes here"]}\n')
    q = (Query(0, 0, "Who won the 2020 election?", ("The mayor won.",)),)
    res = run_retrieval(store, [HydeResult(0, None, q), HydeResult(7, None, q)], small_cfg, workers=1)
    assert not any(f.startswith("retrieval_error") for f in res[0].flags), res[0].flags
    assert res[1].flags == ("store_missing",)
    gone = run_retrieval(tmp_path / "nope", [HydeResult(0, None, q)], small_cfg, workers=1)
    assert gone[0].flags == ("store_missing",) and gone[0].queries[0].query == q[0]


def test_process_pool_matches_in_process(surrogate_store: Path, dev_claims_path: Path, small_cfg) -> None:
    from sanctuary_local.io.claims import read_claims

    hyde = gold_hyde(read_claims(dev_claims_path)[2:4])
    seen: list[int] = []
    pooled = run_retrieval(surrogate_store, hyde, small_cfg, workers=2, on_result=lambda e: seen.append(e.claim_index))
    single = run_retrieval(surrogate_store, hyde, small_cfg, workers=1)
    assert sorted(seen) == [2, 3] and [r.claim_index for r in pooled] == [2, 3]
    assert [r.queries for r in pooled] == [r.queries for r in single]


def test_missing_model_is_a_clear_error(small_cfg) -> None:
    cfg = replace(small_cfg, retriever=replace(small_cfg.retriever, model="snowflake-arctic-embed-m-v2.0"))
    with pytest.raises(MissingModel, match="models fetch"):
        EvidenceRetriever(cfg, models_dir="/nonexistent-models")


def test_all_below_threshold_keeps_the_best_candidate(retriever) -> None:
    """When no query passes the similarity threshold, stage 2 keeps its single best
    candidate (outside the queries, so the verdict prompt never sees it) for the
    placeholder evidence pair of the official outputs."""
    strict = EvidenceRetriever.__new__(EvidenceRetriever)
    strict.__dict__.update(retriever.__dict__)
    strict.cfg = replace(retriever.cfg, retriever=replace(retriever.cfg.retriever, similarity_threshold=0.999))
    docs = [Document(5, 0, "https://a.example", ("The election was won by the incumbent mayor in 2020.",) * 3)]
    q = (Query(5, 0, "Who won the election?", ("The mayor won it.",)), Query(5, 1, "When was the vote held?", ()))
    ev = strict.retrieve(docs, q)
    assert all(not x.snippets for x in ev.queries) and "no_snippets:q0" in ev.flags
    assert ev.below_threshold is not None and ev.below_threshold.query in q
    (sn,) = ev.below_threshold.snippets
    assert 0 < sn.score < 0.999 and docs[0].text[sn.chunk.start : sn.chunk.end] == sn.chunk.text
    assert ClaimEvidence.from_dict(ev.to_dict()) == ev
    normal = retriever.retrieve(docs, q)
    assert any(x.snippets for x in normal.queries) and normal.below_threshold is None  # kept only when nothing passed


def test_a_stop_with_claims_waiting_for_a_worker_ends_the_stage(small_cfg) -> None:
    """A stop request cancels the claims no worker has started. Their futures used to be
    cancelled without notifying ``wait``, so stage 2 waited for them forever (a `run`
    stopped by Ctrl-C in stage 2 with more claims than workers hung, its pool idle)."""
    import threading

    store = Path(__file__).resolve().parents[2] / "examples" / "store"
    hyde = [HydeResult(i % 4, None, (Query(i % 4, 0, "Where is the Eiffel Tower?", ()),)) for i in range(8)]
    out: list[list[ClaimEvidence]] = []
    t = threading.Thread(target=lambda: out.append(run_retrieval(store, hyde, small_cfg, workers=2,
                                                                 should_stop=lambda: True)), daemon=True)
    t.start()
    t.join(timeout=120)
    assert not t.is_alive(), "stage 2 did not end after the stop request"
    assert 0 < len(out[0]) < len(hyde)  # the claims in flight finished, the waiting ones were cancelled


def test_ctrl_c_while_the_workers_start_is_held_for_them(small_cfg) -> None:
    """A Ctrl-C reaches the whole process group. A worker still importing (before its
    initializer ignores SIGINT) used to die of it, with a KeyboardInterrupt traceback on
    the terminal, and its claims came back flagged as a failed worker."""
    import signal as sig

    from sanctuary_local import procs
    from sanctuary_local.stages.evidence import WORKER_FAILED, RetrievalPool

    store = Path(__file__).resolve().parents[2] / "examples" / "store"
    with RetrievalPool(store, small_cfg, workers=2) as pool:
        futs = [pool.submit(HydeResult(i, None, (Query(i, 0, "Where is the Eiffel Tower?", ()),))) for i in range(2)]
        kids = [p for p in procs.descendants(os.getpid())
                if b"multiprocessing.spawn" in Path(f"/proc/{p}/cmdline").read_bytes()]
        assert kids, "no worker was started"
        procs.signal_all(kids, sig.SIGINT)  # at once: the workers are still importing
        results = [f.result(timeout=300) for f in futs]
    assert [r.claim_index for r in results] == [0, 1]
    assert not any(f.startswith(WORKER_FAILED) for r in results for f in r.flags), [r.flags for r in results]
