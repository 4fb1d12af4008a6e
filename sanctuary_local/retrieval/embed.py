"""Sentence-transformers embedders built from an ``EmbedderConfig`` (paper §4.3, §5.4).

Models are resolved with ``sanctuary_local.models.resolve_model`` (packaged, local path
or ``models/<name>``): never downloaded, never silently replaced by a default. Query and
document prompts are config (arctic-embed needs ``query: ``), embeddings are
L2-normalised so inner product = cosine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from sanctuary_local.config import EmbedderConfig
from sanctuary_local.errors import require
from sanctuary_local.models import resolve_model, set_offline_env

__all__ = ["Embedder", "CachedChonkieEmbeddings", "pick_device"]


def pick_device(device: str) -> str:
    """``auto`` → ``cuda`` when torch sees a GPU, else ``cpu``."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class Embedder:
    """One loaded sentence-embedding model; load once per process and reuse."""

    def __init__(self, cfg: EmbedderConfig, models_dir: str | Path = "models") -> None:
        set_offline_env()
        path = resolve_model(cfg.model, models_dir)  # MissingModel says how to fetch it
        st = require("sentence_transformers", "cpu", f"the embedding model '{cfg.model}'")
        self.cfg = cfg
        self.device = pick_device(cfg.device)
        self.model = st.SentenceTransformer(
            str(path), device=self.device, trust_remote_code=cfg.trust_remote_code, local_files_only=True
        )
        if cfg.max_seq_length:
            self.model.max_seq_length = cfg.max_seq_length
        dim = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        self.dimension = int(dim() or 0)

    def _encode(self, texts: Sequence[str], prompt: str) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        emb = self.model.encode(
            list(texts),
            prompt=prompt or None,
            batch_size=self.cfg.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.ascontiguousarray(emb, dtype=np.float32)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalised query embeddings (with the configured query prompt)."""
        return self._encode(texts, self.cfg.query_prompt)

    def encode_documents(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalised document/chunk/sentence embeddings (document prompt)."""
        return self._encode(texts, self.cfg.document_prompt)


def _chonkie_base() -> type:
    from chonkie.embeddings import BaseEmbeddings

    return BaseEmbeddings


class CachedChonkieEmbeddings:
    """Factory for a chonkie ``BaseEmbeddings`` over an ``Embedder`` with a text cache.

    chonkie's SemanticChunker embeds each window and each sentence separately; with
    similarity_window = 1 these are the same strings, so the cache halves the work, and
    ``prime`` lets the caller embed all sentences of a claim in one large batch.
    """

    def __new__(cls, embedder: Embedder) -> Any:  # returns an instance of a BaseEmbeddings subclass
        base = _chonkie_base()

        class _Impl(base):  # type: ignore[misc, valid-type]
            def __init__(self, emb: Embedder) -> None:
                super().__init__()
                self.emb = emb
                self.cache: dict[str, np.ndarray] = {}

            def prime(self, texts: Sequence[str]) -> None:
                missing = list(dict.fromkeys(t for t in texts if t not in self.cache))
                for t, v in zip(missing, self.emb.encode_documents(missing)):
                    self.cache[t] = v

            def clear(self) -> None:
                self.cache.clear()

            def embed(self, text: str) -> np.ndarray:
                return self.embed_batch([text])[0]

            def embed_batch(self, texts: list[str]) -> list[np.ndarray]:
                self.prime(texts)
                return [self.cache[t] for t in texts]

            def similarity(self, u: np.ndarray, v: np.ndarray) -> np.float32:
                return np.float32(np.dot(u, v))  # vectors are unit length

            @property
            def dimension(self) -> int:
                return self.emb.dimension

            def get_tokenizer(self) -> Any:
                return self.emb.model.tokenizer

            def count_tokens_batch(self, texts: list[str]) -> list[int]:
                return [len(x) for x in self.emb.model.tokenizer(list(texts), add_special_tokens=False)["input_ids"]]

            @classmethod
            def _is_available(cls) -> bool:
                return True

        return _Impl(embedder)
