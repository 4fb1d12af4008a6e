"""The batched SANCTUARY pipeline — the public face of a run (``run_pipeline``); its
machinery, the only code that knows every stage, is the ``run`` package (``run/__init__.py``
lists its modules).

Stage-major execution (paper §4, made batched): stage 1 (HyDE) for all pending claims
with its model loaded once → model released → stage 2 (retrieval) in a process pool →
stage 3 (verdict) for all claims with its model. Every finished record is fsync'ed to
its stage JSONL (``run/stage_files.StageFile``) so a rerun resumes exactly where a crash or
``kill -9`` stopped. One bad claim never stops the run: it is flagged and still gets a
valid prediction. With ``budget_s`` a pilot measures the first claims and later claims
are degraded along a documented knob ladder (``run/budget.py``).

A ``StopRequest`` (first Ctrl-C / SIGTERM, see ``interrupt.py``) is honoured between
claims: the claim in flight finishes and is saved, outputs are written for the finished
claims, and ``RunInterrupted`` is raised. A stage file or output that cannot be written
raises ``StorageError`` naming the file and the cause.
"""

from __future__ import annotations

import errno
import logging
import os
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sanctuary_local.errors import UserError
from sanctuary_local.flag_help import degraded_reasons
from sanctuary_local.interrupt import RunInterrupted, StopRequest
from sanctuary_local.models.resolve import set_offline_env
from sanctuary_local.run.options import RunOptions, RunSummary
from sanctuary_local.run.stage_files import storage_error
from sanctuary_local.run.stages import execute
from sanctuary_local.run.state import RunState

__all__ = ["RunOptions", "RunSummary", "run_pipeline"]

log = logging.getLogger("sanctuary_local")


@contextmanager
def _storage_errors(out: Path) -> Iterator[None]:
    """An OSError on a path inside ``out``, or a full/read-only disk, → ``StorageError``."""
    try:
        yield
    except OSError as exc:
        name = exc.filename
        inside = isinstance(name, (str, Path)) and Path(os.path.abspath(name)).is_relative_to(os.path.abspath(out))
        if inside or exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
            raise storage_error(exc) from exc
        raise


def _engine(opts: RunOptions) -> object | None:
    """The run's engine: the caller's resident one (``RunOptions.resident``) when given;
    None for ``local``; a ``RayEngine`` (Ray imported only then, and missing Ray is a
    one-line error before anything is written)."""
    if opts.resident is not None:
        return opts.resident
    if opts.engine == "local":
        return None
    if opts.engine != "ray":
        raise UserError(f"unknown engine '{opts.engine}' (valid: local, ray)")
    from sanctuary_local.run.ray_engine import RayEngine

    return RayEngine(opts.ray_address, opts.ray_actors)


def run_pipeline(opts: RunOptions, stop: StopRequest | None = None) -> RunSummary:
    """Run (or resume) the whole pipeline; write every output file into ``opts.out``.

    ``stop`` (set by the first Ctrl-C/SIGTERM, see ``interrupt.py``) ends the run after
    the claim in flight: the outputs are written for the claims finished so far, then
    ``RunInterrupted`` is raised. ``StorageError``: ``opts.out`` cannot be written."""
    set_offline_env()  # before any Hugging Face library is imported
    engine = _engine(opts)  # checked first; a Ray cluster starts only when the first stage needs it
    with _storage_errors(opts.out):
        run = RunState(opts, stop)
    run.engine = engine
    interrupted: RunInterrupted | None = None
    try:
        with _storage_errors(run.out):
            execute(run)
    except RunInterrupted as exc:
        interrupted = exc
    finally:
        run.reporter.close_progress()
        if run.engine is not None:
            run.engine.close()  # a local Ray cluster stops with the run
    preds = [run.verdict.records[c.index] for c in run.claims if c.index in run.verdict]
    missing = [c.index for c in run.claims if c.index not in run.verdict]
    if missing and interrupted is None:  # cannot happen unless a stage was skipped by an exception above
        raise RuntimeError(f"claims without a prediction: {missing[:10]}")
    reasons: Counter[str] = Counter()
    n_degraded = 0
    for p in preds:
        rs = degraded_reasons(p.flags)
        n_degraded += bool(rs)
        reasons.update(rs)
    with _storage_errors(run.out):
        timings = run.reporter.finalize(preds, run.hyde, run.evidence, run.verdict, n_selected=len(run.claims),
                                        followup=run.followup if run.cfg.followup.enabled else None,
                                        decompose=run.decompose if run.cfg.decompose.enabled else None)
    if interrupted is not None:
        files = {"1": run.hyde, "2": run.evidence, **({"2b": run.followup} if run.cfg.followup.enabled else {}), "3": run.verdict}
        counts = ", ".join(f"stage {i} {sum(c.index in sf for c in run.claims)}/{len(run.claims)}" for i, sf in files.items())
        done = RunInterrupted(interrupted.signum, len(preds), len(run.claims), counts)
        log.warning("%s; rerun the same command to resume", done)
        raise done
    summary = RunSummary(
        out_dir=run.out, n_claims=len(preds), n_degraded=n_degraded, degraded_reasons=dict(reasons),
        label_counts=dict(Counter(p.label for p in preds)), timings=timings, predictions=preds,
    )
    run.reporter.print_summary(summary)
    return summary
