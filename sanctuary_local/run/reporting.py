"""Run outputs and user feedback: progress bars, run.log, predictions.json, submission.csv,
the final summary table, timings.json (built by ``timings``) and manifest.json
(``manifest.py``, written from the start and kept current while stages run)."""

from __future__ import annotations

import logging
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from sanctuary_local import __version__
from sanctuary_local.config.settings import Config
from sanctuary_local.io.safe_io import atomic_write_bytes, open_append
from sanctuary_local.modes import run_stages
from sanctuary_local.run.timings import run_timings

if TYPE_CHECKING:
    from sanctuary_local.records import Prediction
    from sanctuary_local.run.options import RunOptions, RunSummary
    from sanctuary_local.run.stage_files import StageFile

log = logging.getLogger("sanctuary_local")
_JSON = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY
#: Most seconds between two writes of ``manifest.json`` while a stage runs.
MANIFEST_EVERY_S = 30.0


def _dump(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, orjson.dumps(obj, option=_JSON))


class GpuSampler:
    """Samples GPU memory and utilisation through NVML every 0.5 s (null without a GPU)."""

    def __init__(self) -> None:
        self.peak_mem_mb = 0.0
        self.util: list[int] = []
        self._stop = threading.Event()
        self._handle = None
        try:
            import pynvml  # lazy: only in the gpu extra

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            self.name = pynvml.nvmlDeviceGetName(self._handle)
        except Exception:  # noqa: BLE001 - no NVML / no GPU: report null
            return
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            mem = self._nvml.nvmlDeviceGetMemoryInfo(self._handle)
            self.peak_mem_mb = max(self.peak_mem_mb, mem.used / 2**20)
            self.util.append(int(self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu))

    def report(self) -> dict[str, Any] | None:
        self._stop.set()
        if self._handle is None:
            return None
        return {"device": str(self.name), "peak_memory_mb": round(self.peak_mem_mb, 1),
                "mean_utilization_pct": round(statistics.fmean(self.util), 1) if self.util else None}


class StageTracker:
    """Wall time, model-load time, tokens and progress of one stage call."""

    def __init__(self, name: str, stats: dict[str, Any], progress: Progress, n: int,
                 on_claim: Callable[[], None] | None = None) -> None:
        self.name, self.stats, self.progress = name, stats, progress
        self.task = progress.add_task(f"stage {name}", total=n)
        self._on_claim = on_claim

    def timed_load(self, fn: Callable[[], Any]) -> Any:
        t = time.perf_counter()
        try:
            return fn()
        finally:
            self.stats["load_s"] += time.perf_counter() - t

    def advance(self, tokens_in: int = 0, tokens_out: int = 0) -> None:
        self.tokens(tokens_in, tokens_out)
        self.stats["n"] += 1
        self.progress.advance(self.task)
        if self._on_claim is not None:
            self._on_claim()

    def tokens(self, tokens_in: int, tokens_out: int) -> None:
        """Count LLM tokens without finishing a claim (a stage with a model step and a retrieval step)."""
        self.stats["tokens_in"] += tokens_in
        self.stats["tokens_out"] += tokens_out


class _ManifestWriter:
    """``manifest.json`` as the run goes: a stage still running counts its seconds so far."""

    def __init__(self, out: Path, cfg: Config, opts: RunOptions, identity: dict[str, Any], t0: float,
                 stats: dict[str, dict[str, Any]]) -> None:
        from sanctuary_local.run.manifest import RunManifest

        self.manifest = RunManifest(out, cfg, opts, identity, t0)
        self.stats, self.running = stats, {}  # running: stage → when its current call started

    def write(self, status: str = "running") -> None:
        now = time.perf_counter()
        stages = {k: {"total_s": round(v["total_s"] + (now - self.running[k] if k in self.running else 0.0), 3),
                      "n": v["n"]} for k, v in self.stats.items()}
        self.manifest.write(stages, status)

    def quietly(self) -> None:
        """After a stage or a claim: write, unless the disk is full (the stage's own error says so)."""
        try:
            self.write()
        except OSError:
            pass

    def after_claim(self) -> None:
        """The manifest again when it is ``MANIFEST_EVERY_S`` old (what a killed run spent is
        then known to within that, for ``--budget-s``)."""
        if self.manifest.age() >= MANIFEST_EVERY_S:
            self.quietly()


class RunReporter:
    """Everything a run shows and writes besides the stage files."""

    def __init__(self, out: Path, cfg: Config, opts: RunOptions, quiet: bool = False,
                 identity: dict[str, Any] | None = None) -> None:
        self.out, self.cfg, self.opts = out, cfg, opts
        self.console = Console(stderr=True, quiet=quiet)
        self._handler = _open_run_log(out / "run.log")
        self.stats: dict[str, dict[str, Any]] = {
            s: {"total_s": 0.0, "load_s": 0.0, "tokens_in": 0, "tokens_out": 0, "n": 0}
            for s in run_stages(cfg)
        }
        self.budget_notes: list[dict[str, Any]] = []
        self.progress = Progress(
            TextColumn("{task.description:<18}"), BarColumn(), MofNCompleteColumn(), _SpeedColumn(),
            TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
            console=self.console, disable=quiet,
        )
        self.progress.start()
        self.gpu = GpuSampler()
        self.t0 = time.perf_counter()
        _dump(out / "config.json", cfg.to_dict())
        self.manifest = _ManifestWriter(out, cfg, opts, identity or {}, self.t0, self.stats)
        self.manifest.write()  # from the start: a killed run's partial files say what made them
        log.info("sanctuary-local %s run: %s", __version__, " ".join(opts.argv) or "(api)")
        self.console.print(f"[bold]profile[/] {cfg.profile}  [bold]out[/] {out}  (effective config saved to "
                           f"{out / 'config.json'}; --show-config prints it)", highlight=False, soft_wrap=True)
        if opts.show_config and not quiet:
            self.console.print_json(orjson.dumps(cfg.to_dict()).decode())

    @contextmanager
    def stage(self, name: str, n: int) -> Iterator[StageTracker]:
        log.info("stage %s: %d claims", name, n)
        tracker = StageTracker(name, self.stats[name], self.progress, n, self.manifest.after_claim)
        t, n0 = time.perf_counter(), self.stats[name]["n"]
        self.manifest.running[name] = t
        try:
            yield tracker
        finally:
            self.manifest.running.pop(name, None)
            dt = time.perf_counter() - t
            done = self.stats[name]["n"] - n0
            self.stats[name]["total_s"] += dt
            self.stats[name]["last_per_claim_s"] = dt / max(1, n)
            if done == n:
                log.info("stage %s: %.1f s for %d claims", name, dt, n)
            else:  # stopped early (interrupted, or a storage error)
                log.info("stage %s: %.1f s, stopped after %d of %d claims", name, dt, done, n)
            self.manifest.quietly()

    def earlier_attempts(self) -> dict[str, Any]:
        """Wall seconds and per-stage ``{"total_s", "n"}`` of this run's earlier attempts."""
        return self.manifest.manifest.earlier_attempts()

    def per_claim_costs(self) -> dict[str, float]:
        """Measured wall seconds per claim of each stage so far (load time included)."""
        return {s: st["total_s"] / st["n"] for s, st in self.stats.items() if st["n"]}

    def note_budget(self, stage: str, level: int, projected: float | None) -> None:
        self.budget_notes.append({"stage": stage, "level": level, "projected_s_per_claim": projected})

    def close_progress(self) -> None:
        self.progress.stop()

    # ------------------------------------------------------------------ outputs
    def finalize(self, preds: list[Prediction], hyde: StageFile, evidence: StageFile, verdict: StageFile,
                 n_selected: int | None = None, followup: StageFile | None = None,
                 decompose: StageFile | None = None) -> dict[str, Any]:
        """Write the outputs for ``preds``: all selected claims, or after an interrupted run
        the finished ones (then ``timings.json`` says ``"complete": false``)."""
        from sanctuary_local.io.leaderboard import write_leaderboard_csv
        from sanctuary_local.io.predictions import predictions_to_leaderboard, write_predictions_json

        write_predictions_json(preds, self.out / "predictions.json")
        write_leaderboard_csv(predictions_to_leaderboard(preds), self.out / "submission.csv")
        files = {"hyde": hyde, "retrieval": evidence, "verdict": verdict}
        if followup is not None:
            files["followup"] = followup
        if decompose is not None:
            files["decompose"] = decompose
        timings = run_timings(preds, files, self.stats, time.perf_counter() - self.t0, self.gpu.report(),
                              self.opts.budget_s, self.budget_notes)
        n_selected = len(preds) if n_selected is None else n_selected
        timings = {"complete": len(preds) == n_selected, "n_selected": n_selected, **timings}
        _dump(self.out / "timings.json", timings)
        self.manifest.write("complete" if timings["complete"] else "interrupted")
        self._handler.flush()
        return timings

    def print_summary(self, s: RunSummary) -> None:
        self.console.print(summary_table(s))
        log.info("done: %d claims, %d degraded %s", s.n_claims, s.n_degraded, s.degraded_reasons)


def summary_table(s: RunSummary) -> Table:
    """The table a finished run prints: labels, degraded claims and why, seconds per claim."""
    t = Table(title=f"sanctuary-local: {s.n_claims} claims → {s.out_dir}")
    t.add_column("what")
    t.add_column("value", justify="right")
    for label, n in sorted(s.label_counts.items()):
        t.add_row(f"label {label}", str(n))
    t.add_row("degraded claims", f"{s.n_degraded}")
    for reason, n in sorted(s.degraded_reasons.items()):
        t.add_row(f"  {reason}", str(n))
    for name, st in s.timings["stages"].items():
        mean = st["per_claim"]["mean"]
        t.add_row(f"{name} s/claim (mean)", f"{mean:.2f}" if mean is not None else "-")
    t.add_row("wall s/claim", f"{s.timings['wall_s_per_claim'] or 0:.2f}")
    if "budget" in s.timings:
        b = s.timings["budget"]
        proj = [d["projected_s_per_claim"] for d in b["decisions"] if d["projected_s_per_claim"]]
        t.add_row("budget s/claim", f"{b['budget_s_per_claim']:.1f}")
        t.add_row("projected s/claim", f"{proj[-1]:.2f}" if proj else "-")
        t.add_row("achieved s/claim", f"{b['achieved_s_per_claim']:.2f}")
    t.add_row("peak RSS MB", f"{s.timings['peak_rss_mb']:.0f}")
    return t


def _open_run_log(path: Path) -> logging.Handler:
    """``run.log`` as the package logger's one file handler (a previous run's in this
    process is closed), at INFO."""
    handler = _LogFile(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("sanctuary_local")
    for h in list(root.handlers):
        if isinstance(h, logging.FileHandler):
            root.removeHandler(h)
            h.close()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    return handler


class _LogFile(logging.FileHandler):
    """run.log: a failed write (disk full, directory removed) is not reported with a
    traceback per record; the stage-file write that fails next stops the run with one
    clear error line. It is opened with ``O_NOFOLLOW``: a symlink planted at ``run.log``
    is a one-line ``UserError``, never a file outside ``--out`` appended to."""

    def _open(self):  # type: ignore[override] - logging API
        return open(open_append(self.baseFilename), self.mode, encoding=self.encoding, errors=self.errors)

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging API
        pass


class _SpeedColumn(TextColumn):
    def __init__(self) -> None:
        super().__init__("")

    def render(self, task):  # type: ignore[override]
        from rich.text import Text

        speed = task.finished_speed or task.speed
        return Text(f"{speed:.2f} claims/s" if speed else "   - claims/s", style="cyan")
