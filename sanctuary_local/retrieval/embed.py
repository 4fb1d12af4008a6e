"""Sentence embedders built from an ``EmbedderConfig`` (paper §4.3, §5.4).

Models are resolved with ``sanctuary_local.models.resolve.resolve_model`` (packaged, local path
or ``models/<name>``): never downloaded, never silently replaced by a default. Query and
document prompts are config (arctic-embed needs ``query: ``), embeddings are
L2-normalised so inner product = cosine.

``static:<model>`` names a static (model2vec) embedder distilled from ``<model>`` on
first use (``distill_static``: one forward pass per vocabulary token, PCA to 256
dimensions; 11 s measured on 2 cores) and cached under ``$SANCTUARY_CACHE/static/``
(default ``~/.cache/sanctuary_local``). Encoding is then a table look-up and a mean:
~10⁴ sentences/s on one core, for semantic-chunk boundaries and candidate pre-selection.
"""

from __future__ import annotations

from pathlib import Path
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Sequence

import hashlib
import logging
import os
import shutil
import tempfile
import time

import numpy as np

from sanctuary_local.config.settings import EmbedderConfig
from sanctuary_local.errors import require
from sanctuary_local.models.resolve import STATIC_PREFIX, resolve_model, set_offline_env

log = logging.getLogger("sanctuary_local")

__all__ = ["Embedder", "StaticEmbedder", "CachedChonkieEmbeddings", "make_embedder", "pick_device", "distill_static"]

#: PCA dimensions of a distilled static model (model2vec's default).
STATIC_DIMS = 256


def pick_device(device: str) -> str:
    """``auto`` → ``cuda`` when torch sees a GPU, else ``cpu``."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class _BenignLoadReport(logging.Filter):
    """Drops transformers' load report when it lists only UNEXPECTED keys (the packaged
    MiniLM's unused ``embeddings.position_ids`` buffer, printed by every retrieval worker);
    a report with MISSING, MISMATCH or CONVERSION rows (weights that change what the model
    computes, or an error about to be raised) stays."""

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        return "LOAD REPORT" not in msg or any(s in msg for s in ("MISSING", "MISMATCH", "CONVERSION"))


@contextmanager
def _quiet_load() -> Iterator[None]:
    """While a sentence-transformers model loads: no per-worker "Loading weights" progress
    bar and no benign load report; both restored afterwards."""
    from transformers.utils import logging as tlog

    bar, report = tlog.is_progress_bar_enabled(), _BenignLoadReport()
    tlog.disable_progress_bar()
    logger = logging.getLogger("transformers.modeling_utils")
    logger.addFilter(report)
    try:
        yield
    finally:
        logger.removeFilter(report)
        if bar:
            tlog.enable_progress_bar()


class Embedder:
    """One loaded sentence-embedding model; load once per process and reuse."""

    def __init__(self, cfg: EmbedderConfig, models_dir: str | Path = "models") -> None:
        set_offline_env()
        path = resolve_model(cfg.model, models_dir)  # MissingModel says how to fetch it
        st = require("sentence_transformers", "cpu", f"the embedding model '{cfg.model}'")
        self.cfg = cfg
        self.device = pick_device(cfg.device)
        with _quiet_load():
            self.model = st.SentenceTransformer(
                str(path), device=self.device, trust_remote_code=cfg.trust_remote_code, local_files_only=True
            )
        if cfg.max_seq_length:
            self.model.max_seq_length = cfg.max_seq_length
        dim = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        self.dimension = int(dim() or 0)

    @property
    def tokenizer(self) -> Any:
        """The model's tokenizer (chunk sizes are counted in its tokens)."""
        return self.model.tokenizer

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Tokens of each text, without special tokens."""
        return [len(x) for x in self.model.tokenizer(list(texts), add_special_tokens=False)["input_ids"]]

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


def _cache_root() -> Path:
    return Path(os.environ.get("SANCTUARY_CACHE") or Path.home() / ".cache" / "sanctuary_local")


@contextmanager
def _no_distill_bar() -> Iterator[None]:
    """model2vec's "Encoding tokens" tqdm bar off while it distils (the log lines around
    ``distill`` say what happens; a bar from a library is noise in a run's console)."""
    import functools

    from model2vec.distill import inference

    bar = inference.tqdm
    inference.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        inference.tqdm = bar


def distill_static(base: str, models_dir: str | Path = "models", cache: str | Path | None = None) -> Path:
    """Directory of the static model distilled from ``base``; distilled once, then cached.

    The cache key hashes the base model's resolved path, its weight files' sizes, the
    model2vec version and the PCA width, so a changed input gives a new directory. The
    directory is written under a temporary name and renamed: a crash leaves no half model.
    """
    set_offline_env()
    src = resolve_model(base, models_dir)
    m2v = require("model2vec", "cpu", f"the static embedder '{STATIC_PREFIX}{base}'")
    files = sorted((p.name, p.stat().st_size) for p in src.glob("*") if p.is_file())
    key = hashlib.sha256(repr((str(src.resolve()), files, m2v.__version__, STATIC_DIMS)).encode()).hexdigest()[:16]
    slug = "".join(c if c.isalnum() or c in "-_." else "-" for c in base)
    dest = Path(cache) if cache is not None else _cache_root() / "static" / f"{slug}-{key}"
    if (dest / "model.safetensors").exists():
        return dest
    from model2vec.distill import distill

    log.warning("distilling the static model %s%s once (seconds; cached in %s)", STATIC_PREFIX, base, dest)
    t0 = time.perf_counter()
    with _quiet_load(), _no_distill_bar():  # distill loads <base> with transformers too
        model = distill(model_name=str(src), pca_dims=STATIC_DIMS)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=dest.name + ".", dir=dest.parent))
    model.save_pretrained(str(tmp))
    try:
        tmp.rename(dest)
    except OSError:  # another process finished first: keep its copy
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("static model %s%s distilled in %.0f s", STATIC_PREFIX, base, time.perf_counter() - t0)
    return dest


class StaticEmbedder:
    """A model2vec static embedder (``static:<model>``), same interface as ``Embedder``."""

    def __init__(self, cfg: EmbedderConfig, models_dir: str | Path = "models") -> None:
        from model2vec import StaticModel

        self.cfg = cfg
        self.device = "cpu"
        self.model = StaticModel.from_pretrained(str(distill_static(cfg.model[len(STATIC_PREFIX):], models_dir)))
        self.dimension = int(self.model.dim)

    @property
    def tokenizer(self) -> Any:
        return self.model.tokenizer

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Tokens of each text, without special tokens."""
        return [len(e.ids) for e in self.model.tokenizer.encode_batch(list(texts), add_special_tokens=False)]

    def _encode(self, texts: Sequence[str], prompt: str) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        emb = self.model.encode([prompt + t for t in texts] if prompt else list(texts), use_multiprocessing=False)
        emb = np.asarray(emb, dtype=np.float32)
        norms = np.linalg.norm(emb, axis=1, keepdims=True)
        return np.ascontiguousarray(emb / np.maximum(norms, 1e-12))

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalised query embeddings."""
        return self._encode(texts, self.cfg.query_prompt)

    def encode_documents(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalised document/chunk/sentence embeddings."""
        return self._encode(texts, self.cfg.document_prompt)


def make_embedder(cfg: EmbedderConfig, models_dir: str | Path = "models") -> Embedder | StaticEmbedder:
    """``StaticEmbedder`` for a ``static:`` model name, else a sentence-transformers ``Embedder``."""
    if cfg.model.startswith(STATIC_PREFIX):
        return StaticEmbedder(cfg, models_dir)
    return Embedder(cfg, models_dir)


def _chonkie_base() -> type:
    from chonkie.embeddings import BaseEmbeddings

    return BaseEmbeddings


class CachedChonkieEmbeddings:
    """Factory for a chonkie ``BaseEmbeddings`` over an ``Embedder`` with a text cache.

    chonkie's SemanticChunker embeds each window and each sentence separately; with
    similarity_window = 1 these are the same strings, so the cache halves the work, and
    ``prime`` lets the caller embed all sentences of a claim in one large batch.
    """

    def __new__(cls, embedder: Embedder | StaticEmbedder) -> Any:  # returns an instance of a BaseEmbeddings subclass
        base = _chonkie_base()

        class _Impl(base):  # type: ignore[misc, valid-type]
            def __init__(self, emb: Embedder | StaticEmbedder) -> None:
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
                return self.emb.tokenizer

            def count_tokens_batch(self, texts: list[str]) -> list[int]:
                return self.emb.count_tokens(texts)

            @classmethod
            def _is_available(cls) -> bool:
                return True

        return _Impl(embedder)
