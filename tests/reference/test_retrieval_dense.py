"""Dense search (§4.3–4.4): FAISS vs numpy brute force; dedup, threshold, cap."""

from __future__ import annotations

import numpy as np
import pytest

from sanctuary_local.records import Segment
from sanctuary_local.retrieval.chunking import consolidate, strip_span
from sanctuary_local.retrieval.dense import dense_search, select_snippets


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def test_faiss_matches_numpy_brute_force() -> None:
    rng = np.random.default_rng(0)
    chunks, queries = _unit(rng.normal(size=(500, 32))), _unit(rng.normal(size=(7, 32)))
    scores, ids = dense_search(queries, chunks, 20, "cpu")
    brute = queries @ chunks.T
    for i in range(7):
        expect = np.argsort(-brute[i], kind="stable")[:20]
        assert ids[i].tolist() == expect.tolist()
        np.testing.assert_allclose(scores[i], brute[i][expect], rtol=1e-5, atol=1e-5)
        assert all(a >= b for a, b in zip(scores[i], scores[i][1:]))


def test_dense_search_k_larger_than_corpus_and_empty() -> None:
    rng = np.random.default_rng(1)
    chunks, queries = _unit(rng.normal(size=(3, 8))), _unit(rng.normal(size=(2, 8)))
    scores, ids = dense_search(queries, chunks, 64)
    assert ids.shape == (2, 3) and sorted(ids[0].tolist()) == [0, 1, 2]
    s, i = dense_search(queries, np.zeros((0, 8), np.float32), 64)
    assert s.shape == (2, 0)


def test_select_dedups_keeping_better_ranked_and_caps() -> None:
    base = _unit(np.eye(12, 16) + 0.01)
    near = _unit(base[0:1] + 0.05 * np.eye(1, 16, 5))  # cosine > 0.9 with chunk 0
    chunks = np.vstack([base, near])
    near_idx = len(chunks) - 1
    q = chunks[0] * 0.7 + chunks[near_idx] * 0.3
    scores, ids = dense_search(_unit(q[None, :]), chunks, 13, "cpu")
    kept = select_snippets(scores[0], ids[0], chunks, threshold=-1.0, dedup=0.9, max_snippets=8)
    kept_ids = [k for k, _ in kept]
    assert float(chunks[0] @ chunks[near_idx]) > 0.9
    first = ids[0].tolist().index(0) < ids[0].tolist().index(near_idx)
    assert (0 in kept_ids) != (near_idx in kept_ids)  # exactly one of the duplicates survives
    assert (0 in kept_ids) == first  # …the better-ranked one
    assert len(kept) == 8
    assert [s for _, s in kept] == sorted((s for _, s in kept), reverse=True)


def test_select_threshold() -> None:
    chunks = _unit(np.eye(4))
    scores = np.array([0.9, 0.6, 0.5, 0.1], np.float32)
    kept = select_snippets(scores, np.arange(4), chunks, threshold=0.52, dedup=0.9, max_snippets=8)
    assert [i for i, _ in kept] == [0, 1]
    assert select_snippets(scores, np.arange(4), chunks, threshold=0.95, dedup=0.9, max_snippets=8) == []


@pytest.mark.parametrize("device", ["cuda"])
def test_cuda_faiss_without_gpu_is_a_clear_error(device: str) -> None:
    import faiss

    if hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0:
        pytest.skip("a GPU is present")
    from sanctuary_local.errors import UserError

    with pytest.raises(UserError, match="faiss_device"):
        dense_search(_unit(np.eye(2, 4)), _unit(np.eye(3, 4)), 2, device)


@pytest.mark.gpu
def test_gpu_faiss_equals_cpu() -> None:
    import faiss

    if not hasattr(faiss, "StandardGpuResources") or faiss.get_num_gpus() == 0:
        pytest.skip("needs faiss-gpu and CUDA")
    rng = np.random.default_rng(2)
    chunks, queries = _unit(rng.normal(size=(300, 64))), _unit(rng.normal(size=(5, 64)))
    c = dense_search(queries, chunks, 16, "cpu")
    g = dense_search(queries, chunks, 16, "cuda")
    np.testing.assert_array_equal(c[1], g[1])


def test_consolidate_and_strip() -> None:
    segs = [Segment(0, 0, 10, 20, 5), Segment(0, 0, 0, 10, 5), Segment(0, 0, 30, 40, 5), Segment(0, 0, 10, 20, 5)]
    assert consolidate(segs) == [(0, 20), (30, 40)]
    assert strip_span("  ab c \n", 0, 8) == (2, 6)
    assert strip_span("   ", 0, 3)[0] == strip_span("   ", 0, 3)[1]
