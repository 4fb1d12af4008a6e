"""The check queue: bounded, first come first served, one worker thread running one check
at a time through the same pipeline (and crash-safe run files) as ``check``.

``submit`` refuses a check when ``max_queued`` are waiting (``QueueFull``: the API answers
429). The worker loads the models once (``ResidentEngine.preload``) and keeps them.
``stop`` asks the check in flight to stop at its next stop point (the pipeline's
``StopRequest`` flag) and waits up to ``grace_s`` for it: a check that stopped, or did not
in time, stays queued on disk and resumes when the server starts again. The ETA of a check
is made from the stage times of the last finished checks (``eta_s``).

``cancel_check`` deletes a check: a waiting one leaves the queue and is deleted at once, a
finished one too; the one running is marked ``cancelled`` and asked to stop at its next stop
point (its own ``StopRequest``, as ``stop`` does for the server), and the worker deletes it
once it has stopped, then takes the next check.
"""

from __future__ import annotations

import heapq
import logging
import statistics
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from sanctuary_local.interrupt import RunInterrupted, StopRequest
from sanctuary_local.serve.jobs import CheckRecord, CheckStore, delete_check
from sanctuary_local.serve.resident import ResidentEngine

__all__ = ["CheckQueue", "CheckRunner", "EtaModel", "QueueFull", "cancel_check", "eta_s", "stage_estimates", "stages"]

log = logging.getLogger("sanctuary_local")

#: The stages of a check in order, for the ETA before one has finished (default config).
DEFAULT_STAGES = ("hyde", "retrieval", "verdict")
#: Finished checks whose stage times make the ETA (the most recent).
ETA_WINDOW = 10


class QueueFull(Exception):
    """``max_queued`` checks are waiting already."""


# ------------------------------------------------------------------------ ETA
def _finished(store: CheckStore) -> list[CheckRecord]:
    """The last ``ETA_WINDOW`` finished checks, newest first (one pass over the history; ids by
    number: ``1000000`` is newer than ``999999``)."""
    done = (r for r in list(store.records.values()) if r.status == "done" and r.stage_seconds)
    return heapq.nlargest(ETA_WINDOW, done, key=lambda r: int(r.id))


def stage_estimates(store: CheckStore) -> dict[str, float]:
    """Median seconds of each stage over the last finished checks ({} before the first)."""
    done = _finished(store)
    names = {s for r in done for s in r.stage_seconds}
    return {s: statistics.median(r.stage_seconds[s] for r in done if s in r.stage_seconds) for s in names}


def stages(store: CheckStore) -> list[str]:
    """The stages of a check, in order (as the last finished check ran them)."""
    done = _finished(store)
    return list(done[0].stage_seconds) if done else list(DEFAULT_STAGES)


class EtaModel:
    """``stage_estimates`` and ``stages`` of a store, made again only once another check has
    finished (``runner.finishes``): a page or API call lists every check, and each asking
    for them afresh cost a pass over the whole history (quadratic in it)."""

    def __init__(self, store: CheckStore, runner: CheckRunner) -> None:
        self.store, self.runner, self._seen = store, runner, -1
        self._value: tuple[dict[str, float], list[str]] = ({}, list(DEFAULT_STAGES))

    def get(self) -> tuple[dict[str, float], list[str]]:
        seen = self.runner.finishes
        if seen != self._seen:
            self._value, self._seen = (stage_estimates(self.store), stages(self.store)), seen
        return self._value


def _remaining(rec: CheckRecord, est: dict[str, float], order: list[str]) -> float:
    left = [s for s in order if s not in rec.stage_seconds and s != rec.stage]
    in_stage = 0.0
    if rec.stage is not None and rec.stage_started is not None:
        in_stage = max(0.0, est.get(rec.stage, 0.0) - (time.time() - rec.stage_started))
    return in_stage + sum(est.get(s, 0.0) for s in left)


def eta_s(store: CheckStore, rec: CheckRecord, position: int | None, current: CheckRecord | None,
          model: tuple[dict[str, float], list[str]] | None = None) -> float | None:
    """Seconds until ``rec`` (``position`` in the queue, or running) should be done; None
    before any check has finished or when it is neither waiting nor running. ``model``:
    ``(stage_estimates, stages)`` when known (``EtaModel``)."""
    est, order = model or (stage_estimates(store), stages(store))
    if not est:
        return None
    if rec.status == "running":
        return _remaining(rec, est, order)
    if position is None:
        return None
    ahead = _remaining(current, est, order) if current is not None and current.status == "running" else 0.0
    return ahead + sum(est.values()) * position


# --------------------------------------------------------------------- runner
class CheckRunner:
    """Runs one check at a time through ``run_pipeline`` with the resident models, keeping
    its record current: status, stage, stage times, how it ended."""

    def __init__(self, store: CheckStore, corpus: Path, profile: str, overrides: dict[str, Any] | None,
                 models_dir: str | None) -> None:
        self.store, self.corpus, self.profile = store, Path(corpus), profile
        self.overrides, self.models_dir = overrides, models_dir
        self.engine = ResidentEngine(on_stage=self._on_stage)
        self.current: CheckRecord | None = None
        self.finishes = 0
        """Checks ended so far (the ETA's stage times change only then)."""
        self.abandoned = False
        """The server stopped without waiting for the worker: it must write nothing more."""

    def preload(self) -> None:
        from sanctuary_local.config.settings import load_config

        cfg = load_config(self.profile, self.overrides)
        if self.models_dir:
            cfg.models_dir = self.models_dir
        self.engine.preload(cfg)

    def _on_stage(self, name: str) -> None:
        rec = self.current
        if rec is None or self.abandoned:
            return
        _end_stage(rec)
        rec.stage, rec.stage_started = name, time.time()
        self.store.save(rec)

    def run(self, rec: CheckRecord, stop: StopRequest, problem: str = "") -> None:
        """One check, start to end; its record says how it ended (a stop leaves it queued).
        ``problem``: why no check can run (the models did not load): it fails with that."""
        from sanctuary_local.errors import UserError

        if problem:
            return self.finish(rec, "failed", error=problem)
        self.current = rec
        rec.status, rec.started, rec.attempts = "running", rec.started or time.time(), rec.attempts + 1
        self.store.save(rec)
        try:
            pred = self._pipeline(rec, stop)
        except RunInterrupted:  # the server is stopping: the finished stages are saved, it resumes at start
            self.requeue(rec)
        except UserError as exc:
            self.finish(rec, "failed", error=str(exc))
        except Exception as exc:  # noqa: BLE001 - one failing check never stops the server
            log.exception("serve: check %s failed", rec.id)
            self.finish(rec, "failed", error=f"{type(exc).__name__}: {exc}")
        else:
            self.finish(rec, "done", label=pred.label)
        finally:
            self.current = None

    def requeue(self, rec: CheckRecord) -> None:
        """Back to ``queued`` after a stop, with a note; it resumes from its stage files. The
        stage it stopped in keeps its seconds so far: a stop right after a stage leaves that
        stage saved, and the resumed run does not run (or time) it again."""
        if self.abandoned:
            return
        _end_stage(rec)
        rec.notes.append(f"the server stopped during stage {rec.stage or 'start'}: resumes when it starts again")
        rec.status, rec.stage, rec.stage_started = "queued", None, None
        self.store.save(rec)

    def finish(self, rec: CheckRecord, status: str, *, error: str = "", label: str | None = None) -> None:
        if self.abandoned:
            return
        _end_stage(rec)
        rec.status, rec.finished, rec.error, rec.label = status, time.time(), error, label
        rec.stage = rec.stage_started = None
        self.store.save(rec)
        self.finishes += 1

    def _pipeline(self, rec: CheckRecord, stop: StopRequest) -> Any:
        from sanctuary_local.pipeline import RunOptions, run_pipeline

        folder = self.store.folder(rec.id)
        opts = RunOptions(claims=folder / "claim.json", store=self.corpus, out=self.store.run_dir(rec.id),
                          profile=self.profile, force=True, quiet=True, overrides=self.overrides,
                          models_dir=self.models_dir, overlap=False, resident=self.engine,
                          argv=["sanctuary-local", "serve", f"(check {rec.id})"])
        return run_pipeline(opts, stop=stop).predictions[0]


def _end_stage(rec: CheckRecord) -> None:
    if rec.stage is not None and rec.stage_started is not None:
        rec.stage_seconds[rec.stage] = round(rec.stage_seconds.get(rec.stage, 0.0) + time.time() - rec.stage_started, 3)


# ---------------------------------------------------------------------- queue
class CheckQueue:
    """The waiting checks and the worker thread that runs them (see the module docstring)."""

    def __init__(self, store: CheckStore, corpus: Path, profile: str, *, max_queued: int = 100,
                 overrides: dict[str, Any] | None = None, models_dir: str | None = None) -> None:
        self.store, self.max_queued = store, max_queued
        self.runner = CheckRunner(store, corpus, profile, overrides, models_dir)
        self.engine, self.eta_model = self.runner.engine, EtaModel(store, self.runner)
        self._pending: deque[str] = deque()
        self._cond = threading.Condition()
        self._closing = False
        self._stop: StopRequest | None = None
        self._working: str | None = None
        self.state = "starting"
        """starting | loading models | ready | stopping | failed: what the page says of the server."""
        self.problem = ""
        self.interrupted: str | None = None  # the check running when ``stop`` was called
        self._thread = threading.Thread(target=self._work, name="check-worker", daemon=True)

    @property
    def current(self) -> CheckRecord | None:
        return self.runner.current

    def start(self) -> None:
        """Queue what a stopped server left unfinished, then start the worker."""
        self._pending.extend(rec.id for rec in self.store.recover())
        self._thread.start()

    def submit(self, claim: str, claim_date: str | None) -> CheckRecord:
        with self._cond:
            if len(self._pending) >= self.max_queued:
                raise QueueFull(f"the queue is full: {len(self._pending)} checks are waiting (at most "
                                f"{self.max_queued}); try again when one has finished")
            rec = self.store.create(claim, claim_date)
            self._pending.append(rec.id)
            self._cond.notify()
        return rec

    def position(self, check_id: str) -> int | None:
        """1 for the next check to run; None when it is not waiting."""
        with self._cond:
            return self._pending.index(check_id) + 1 if check_id in self._pending else None

    def waiting(self) -> list[str]:
        with self._cond:
            return list(self._pending)

    def eta_s(self, rec: CheckRecord) -> float | None:
        return eta_s(self.store, rec, self.position(rec.id), self.current, self.eta_model.get())

    def stages(self) -> list[str]:
        return self.eta_model.get()[1]

    def stop(self, grace_s: float) -> bool:
        """Stop taking checks, ask the one in flight to stop; True when the worker ended
        within ``grace_s``, else its check is saved as queued and False."""
        with self._cond:
            self._closing, self.state, self.interrupted = True, "stopping", self._working
            if self._stop is not None:
                self._stop.request()
            self._cond.notify_all()
        if self._thread.ident is None:  # never started
            return True
        self._thread.join(grace_s)
        if not self._thread.is_alive():
            return True
        rec = self.runner.current
        if rec is not None:  # still generating: its finished stages are on disk; resumed at start
            self.runner.requeue(rec)
        self.runner.abandoned = True
        return False

    def _next(self) -> str | None:
        with self._cond:
            while not self._pending and not self._closing:
                self._cond.wait()
            if self._closing:
                return None
            self._stop = StopRequest()  # a plain flag here: the server owns the signals
            self._working = self._pending.popleft()
            return self._working

    def _work(self) -> None:
        try:
            self.state = "loading models"
            self.runner.preload()
            self.state = "ready"
        except Exception as exc:  # noqa: BLE001 - the page and every check say why
            self.state, self.problem = "failed", f"the models could not be loaded: {exc}"
            log.error("serve: %s", self.problem)
        while (check_id := self._next()) is not None:
            rec = self.store.get(check_id)
            if rec is not None and not rec.cancelled:
                self.runner.run(rec, self._stop or StopRequest(), self.problem)
            with self._cond:
                if rec is not None and rec.cancelled:  # deleted while it ran (cancel_check)
                    _delete_quietly(self.store, check_id)
                elif rec is not None and rec.status == "queued":  # stopped mid-check: first again at restart
                    self._pending.appendleft(check_id)
                self._stop = self._working = None


def _delete_quietly(store: CheckStore, check_id: str) -> None:
    """``delete_check`` from the worker: a refusal is logged (the record stays marked ``cancelled``)."""
    from sanctuary_local.errors import UserError

    try:
        delete_check(store, check_id)
    except (UserError, OSError) as exc:
        log.error("serve: check %s was cancelled but cannot be deleted: %s", check_id, exc)


def cancel_check(queue: CheckQueue, check_id: str) -> str | None:
    """Delete a check (see the module docstring): ``"deleted"`` when it is gone now,
    ``"cancelling"`` when it runs and goes once it stops, None when there is no such check.
    A folder that may not be removed is a ``UserError``."""
    with queue._cond:
        rec = queue.store.get(check_id)
        if rec is None:
            return None
        if check_id in queue._pending or (check_id != queue._working and rec.status not in ("queued", "running")):
            delete_check(queue.store, check_id)  # first: a refusal leaves it queued
            if check_id in queue._pending:
                queue._pending.remove(check_id)
            return "deleted"
        if not rec.cancelled:
            rec.cancelled = True
            rec.notes.append("cancelled: it stops at its next stop point, then it is deleted")
            queue.store.save(rec)
        if check_id == queue._working and queue._stop is not None:
            queue._stop.request()
        return "cancelling"
