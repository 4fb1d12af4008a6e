"""Stages 1+2 overlapped: stage 1 in waves, each finished wave's claims straight to the
retrieval pool, so CPU retrieval runs while the GPU generates the next wave."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import wait
from typing import Any

from sanctuary_local.records import Claim, HydeResult
from sanctuary_local.run.budget import apply_level
from sanctuary_local.run.state import RunState

__all__ = ["OverlappedRetrieval"]

log = logging.getLogger("sanctuary_local")

#: ``stages.stage_hyde``'s shape: ``(run, claims, level, on_wave=, n_waves=)``.
HydeStage = Callable[..., None]


class OverlappedRetrieval:
    """Stage 1 in waves; each finished wave's claims go straight to the retrieval pool, so
    CPU retrieval runs while the GPU generates the next wave. Results are identical to the
    stage-major order (every claim's retrieval depends only on its own queries)."""

    def __init__(self, run: RunState, level: int, stage_hyde: HydeStage) -> None:
        self.run, self.level, self.stage_hyde = run, level, stage_hyde
        self.lock = threading.Lock()
        self.futures: list[Any] = []
        self.st: Any = None  # the retrieval stage's reporter and pool, while execute runs
        self.pool: Any = None

    def execute(self, claims: list[Claim]) -> None:
        from sanctuary_local.stages.evidence import RetrievalPool

        r = self.run
        todo = [c for c in claims if c.index not in r.evidence]
        if not todo:
            return self.stage_hyde(r, claims, self.level)
        r.stops.check()
        cfg = apply_level(r.cfg, self.level)
        with r.reporter.stage("retrieval", len(todo)) as st, RetrievalPool(
            r.store_path, cfg.retrieval, models_dir=cfg.models_dir, workers=cfg.retrieval.workers
        ) as pool:
            self.st, self.pool = st, pool
            self.submit([r.hyde.records[c.index] for c in todo if c.index in r.hyde])  # resumed claims first
            self.stage_hyde(r, claims, self.level, on_wave=self.submit, n_waves=4)
            while wait(self.futures, timeout=0.5).not_done and not r.stops.stopping():
                pass
            if r.stops.stopping():
                pool.cancel_pending()  # closing the pool waits for the claims in flight
        r.stops.check()
        log.info("stages 1+2 overlapped for %d claims", len(todo))

    def submit(self, results: list[HydeResult]) -> None:
        for h in results:
            if h.claim_index not in self.run.evidence:
                fut = self.pool.submit(self.run.retrieval_input(h))
                self.futures.append(fut)
                fut.add_done_callback(self.done)

    def done(self, fut: Any) -> None:
        r = self.run
        if fut.cancelled() or not r.stops.keep(ev := fut.result()):
            return
        with self.lock:  # callbacks may come from the pool's thread
            try:
                r.evidence.append(ev.claim_index, r.trusted(ev), {"seconds": float(ev.timings.get("total", 0.0)),
                                                       "budget_level": self.level, "overlapped": True})
            except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread (stops.check)
                r.stops.fault = r.stops.fault or exc
                return
            self.st.advance()
