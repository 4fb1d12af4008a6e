"""The server's models, loaded once per process and reused by every check.

``ResidentEngine`` is a run engine (``RunOptions.resident``; the same ``llm_waves`` /
``retrieve`` / ``close`` shape as ``run/ray_engine.py``'s, plus ``trained_waves``) whose
models stay loaded between runs: a backend per distinct ``LLMConfig`` (the ``cpu``
profiles use one model for stages 1 and 3, so one load serves both), stage 3's trained
verdict model, one ``EvidenceRetriever`` per retrieval config, and the corpus index reopened only when
``sanctuary-local index`` has written a new generation. ``close`` (which the pipeline
calls after each run) keeps them; ``shutdown`` releases them.

Stage 2 runs in this process, claim by claim (a check is one claim): no pool worker is
started, so a killed server leaves no retrieval process behind. ``on_stage`` is told
each stage as it starts (the progress the page shows).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from sanctuary_local.records import ClaimEvidence, HydeResult, QueryEvidence
from sanctuary_local.run.waves import resilient, trained_waves, waves

__all__ = ["ResidentEngine"]

log = logging.getLogger("sanctuary_local")


def _key(cfg: Any, models_dir: str | Path) -> bytes:
    """What identifies a loaded model: every field of its config section, and where models live."""
    return orjson.dumps([dataclasses.asdict(cfg), str(models_dir)], option=orjson.OPT_SORT_KEYS, default=str)


class _ResidentVerdict:
    """Stage 3's trained verdict model kept loaded (``ResidentEngine``'s part for it)."""

    _lock: threading.Lock
    _trained: dict[bytes, Any]
    load_s: float
    on_stage: Callable[[str], None]

    def trained_model(self, name: str, rule: bool, threads: int) -> Any:
        """``trained.load_trained``, each model loaded on first use and kept."""
        from sanctuary_local.stages.verdict.trained import load_trained

        key = orjson.dumps([name, rule, threads])
        with self._lock:
            if key not in self._trained:
                t = time.perf_counter()
                self._trained[key] = load_trained(name, rule, threads)
                self.load_s += time.perf_counter() - t
            return self._trained[key]

    def trained(self, verdict_cfg: Any) -> Any:
        """Stage 3's trained verdict model (``verdict.trained_model``), loaded on first use."""
        from sanctuary_local.stages.verdict.trained import trained_threads

        return self.trained_model(verdict_cfg.trained_model, verdict_cfg.trained_rule, trained_threads(verdict_cfg))

    def trained_waves(self, verdict_cfg: Any, st: Any, *args: Any) -> Iterator[tuple[list[Any], list[Any], float]]:
        """``waves.trained_waves`` with the resident verdict model."""
        self.on_stage(st.name)
        yield from trained_waves(verdict_cfg, st, *args, load=self.trained_model)


class _ResidentCorpus:
    """The corpus kept open (``ResidentEngine``'s part for it), reopened when it changes."""

    _lock: threading.Lock
    _sources: dict[str, tuple[bytes, Any]]

    def source(self, store: str | Path) -> Any:
        """The corpus (``CorpusSource``), reopened when its live generation changed. One per
        index folder: a run hands its pinned generation (``index.pinned``), and the one it
        replaces is dropped, so its lease ends and a rerun of ``index`` can remove it."""
        from sanctuary_local.corpus.index import CURRENT, GEN_NAME
        from sanctuary_local.corpus.source import open_source

        path = Path(store)
        if GEN_NAME.fullmatch(path.name):  # a generation of the index folder above it
            key, current = str(path.parent), path.name.encode()
        else:
            key, current = str(path), (path / CURRENT).read_bytes() if (path / CURRENT).is_file() else b""
        with self._lock:
            known = self._sources.get(key)
            if known is None or known[0] != current:
                self._sources[key] = known = (current, open_source(path))
            return known[1]


class ResidentEngine(_ResidentVerdict, _ResidentCorpus):
    """A run engine whose models outlive the run (see the module docstring)."""

    def __init__(self, on_stage: Callable[[str], None] | None = None) -> None:
        self.on_stage = on_stage or (lambda name: None)
        self._backends: dict[bytes, Any] = {}
        self._retrievers: dict[bytes, Any] = {}
        self._trained: dict[bytes, Any] = {}
        self._sources: dict[str, tuple[bytes, Any]] = {}
        self._lock = threading.Lock()  # one check runs at a time; the lock guards a preload racing it
        self.load_s = 0.0  # seconds spent loading models so far (the first check, or ``preload``, pays them)

    # ------------------------------------------------------------------ models
    def backend(self, llm_cfg: Any, models_dir: str | Path) -> Any:
        """The LLM backend for this config, loaded on first use."""
        from sanctuary_local import llm

        key = _key(llm_cfg, models_dir)
        with self._lock:
            if key not in self._backends:
                t = time.perf_counter()
                self._backends[key] = llm.make_backend(llm_cfg, models_dir)
                self.load_s += time.perf_counter() - t
                log.info("serve: loaded %s model %s in %.1f s", llm_cfg.backend, llm_cfg.model, time.perf_counter() - t)
            return self._backends[key]

    def retriever(self, cfg: Any, models_dir: str | Path) -> Any:
        """The stage-2 retriever (embedding models) for this retrieval config, loaded on first use."""
        from sanctuary_local.stages.evidence import EvidenceRetriever

        key = _key(cfg, models_dir)
        with self._lock:
            if key not in self._retrievers:
                t = time.perf_counter()
                self._retrievers[key] = EvidenceRetriever(cfg, models_dir)
                self.load_s += time.perf_counter() - t
            return self._retrievers[key]

    def preload(self, cfg: Any) -> None:
        """Load what a check with config ``cfg`` needs (both LLM stages, retrieval) now."""
        self.backend(cfg.hyde.llm, cfg.models_dir)
        if cfg.verdict.mode == "trained":
            self.trained(cfg.verdict)
        else:
            self.backend(cfg.verdict.llm, cfg.models_dir)
        self.retriever(cfg.retrieval, cfg.models_dir)

    # ------------------------------------------------------------- engine API
    def llm_waves(self, st: Any, llm_cfg: Any, models_dir: str, todo: list[Any], size: int,
                  work: Callable[[Any, list[Any]], list[Any]],
                  fallback: Callable[[Any, Exception], Any]) -> Iterator[tuple[list[Any], list[Any], float]]:
        """``waves.llm_waves`` with the resident backend (never closed here)."""
        self.on_stage(st.name)
        backend = st.timed_load(lambda: self.backend(llm_cfg, models_dir))
        for wave in waves(todo, size):
            t = time.perf_counter()
            results = resilient(wave, lambda w: work(backend, w), fallback)
            yield wave, results, (time.perf_counter() - t) / len(wave)

    def retrieve(self, store: Any, todo: list[HydeResult], cfg: Any, *, models_dir: str | Path = "models",
                 on_result: Callable[[ClaimEvidence], None] | None = None,
                 should_stop: Callable[[], bool] | None = None, **_: Any) -> None:
        """Stage 2 in this process, claim by claim, with the resident retriever; a failing
        claim gets a flagged empty result (as a pool worker gives it)."""
        self.on_stage("retrieval")
        retriever, source = self.retriever(cfg, models_dir), self.source(store)
        for h in todo:
            if should_stop is not None and should_stop():
                return
            try:
                ev = source.retrieve(retriever, h.claim_index, tuple(h.queries))
            except Exception as exc:  # noqa: BLE001 - one bad claim never kills the server
                msg = f"{type(exc).__name__}: {exc}".replace("\n", " ")[:300]
                ev = ClaimEvidence(h.claim_index, tuple(QueryEvidence(q) for q in h.queries), (f"retrieval_error: {msg}",))
            if on_result is not None:
                on_result(ev)

    def close(self) -> None:
        """The end of one run: the models stay loaded for the next."""

    def shutdown(self) -> None:
        """Release every model (the server is stopping)."""
        with self._lock:
            for backend in self._backends.values():
                try:
                    backend.close()
                except Exception:  # noqa: BLE001 - stopping anyway
                    log.warning("serve: a backend did not close cleanly", exc_info=True)
            self._backends.clear()
            self._retrievers.clear()
            self._trained.clear()
            self._sources.clear()
