"""Dense search of queries over a claim's chunks (SANCTUARY §4.3–4.4).

FAISS exact inner-product search over L2-normalised embeddings (= cosine). A GPU index
is used when ``faiss_device`` allows it and faiss-gpu + CUDA are present; exact search
gives the same results either way. Per query, candidates are walked best first; a chunk
whose cosine to an already kept chunk exceeds ``dedup_threshold`` (0.9) is a
near-duplicate and is dropped, so the better-ranked copy wins; at most ``max_snippets``
(8) chunks with cosine ≥ the retriever's ``similarity_threshold`` are kept.
"""

from __future__ import annotations

import numpy as np

__all__ = ["build_index", "dense_search", "select_snippets"]


def _use_gpu(faiss: object, device: str) -> bool:
    if device == "cpu" or not hasattr(faiss, "StandardGpuResources"):
        return False
    try:
        return faiss.get_num_gpus() > 0  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - faiss-cpu builds lack the symbol
        return False


def build_index(vectors: np.ndarray, device: str = "auto"):  # -> faiss.Index
    """Exact inner-product FAISS index over (n, d) float32 unit vectors."""
    import faiss

    index = faiss.IndexFlatIP(vectors.shape[1])
    if _use_gpu(faiss, device):
        index = faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), 0, index)
    elif device == "cuda":
        from sanctuary_local.errors import UserError

        raise UserError("retrieval.faiss_device = 'cuda' but faiss-gpu or a CUDA GPU is not available")
    index.add(np.ascontiguousarray(vectors, dtype=np.float32))
    return index


def dense_search(queries: np.ndarray, chunks: np.ndarray, k: int, device: str = "auto") -> tuple[np.ndarray, np.ndarray]:
    """Top-k (scores, chunk indices) per query, best first; -1 pads when k > n chunks."""
    n_q = queries.shape[0]
    if chunks.shape[0] == 0 or n_q == 0:
        return np.zeros((n_q, 0), np.float32), np.zeros((n_q, 0), np.int64)
    index = build_index(chunks, device)
    k = min(k, chunks.shape[0])
    scores, ids = index.search(np.ascontiguousarray(queries, dtype=np.float32), k)
    return scores, ids


def select_snippets(
    scores: np.ndarray, ids: np.ndarray, chunks: np.ndarray, threshold: float, dedup: float, max_snippets: int
) -> list[tuple[int, float]]:
    """One query's kept (chunk index, cosine): threshold, near-duplicate filter, cap."""
    kept: list[int] = []
    out: list[tuple[int, float]] = []
    for score, idx in zip(scores.tolist(), ids.tolist()):
        if idx < 0 or score < threshold or len(out) >= max_snippets:
            break  # candidates are sorted: nothing later can pass the threshold
        if kept and float(np.max(chunks[kept] @ chunks[idx])) > dedup:
            continue
        kept.append(idx)
        out.append((idx, float(score)))
    return out
