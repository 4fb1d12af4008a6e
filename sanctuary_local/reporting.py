"""Run outputs and user feedback: progress bars, run.log, timings.json, manifest.json
(``run_manifest.py``), predictions.json, submission.csv and the final summary table."""

from __future__ import annotations

import logging
import resource
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from sanctuary_local import __version__
from sanctuary_local.config import Config
from sanctuary_local.io.safe_io import atomic_write_bytes, open_append

if TYPE_CHECKING:
    from sanctuary_local.run_types import RunOptions, RunSummary
    from sanctuary_local.records import Prediction
    from sanctuary_local.runstate import StageFile

log = logging.getLogger("sanctuary_local")
_JSON = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY
#: Most seconds between two writes of ``manifest.json`` while a stage runs.
MANIFEST_EVERY_S = 30.0


def _dump(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, orjson.dumps(obj, option=_JSON))


def peak_rss_mb() -> float:
    """Peak resident memory of this process and of its (finished) worker processes, MB."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return round(max(own, kids) / 1024.0, 1)


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


class RunReporter:
    """Everything a run shows and writes besides the stage files."""

    def __init__(self, out: Path, cfg: Config, opts: RunOptions, quiet: bool = False,
                 identity: dict[str, Any] | None = None) -> None:
        self.out, self.cfg, self.opts = out, cfg, opts
        self.console = Console(stderr=True, quiet=quiet)
        self._setup_log()
        self.stats: dict[str, dict[str, Any]] = {
            s: {"total_s": 0.0, "load_s": 0.0, "tokens_in": 0, "tokens_out": 0, "n": 0}
            for s in (*(("decompose",) if cfg.decompose.enabled else ()), "hyde", "retrieval",
                      *(("followup",) if cfg.followup.enabled else ()), "verdict")
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
        from sanctuary_local.run_manifest import RunManifest

        self._running: dict[str, float] = {}  # stage → when its current call started
        self.manifest = RunManifest(out, cfg, opts, identity or {}, self.t0)
        self.write_manifest()  # from the start: a killed run's partial files say what made them
        log.info("sanctuary-local %s run: %s", __version__, " ".join(opts.argv) or "(api)")
        self.console.print(f"[bold]profile[/] {cfg.profile}  [bold]out[/] {out}  (effective config saved to "
                           f"{out / 'config.json'}; --show-config prints it)", highlight=False, soft_wrap=True)
        if opts.show_config and not quiet:
            self.console.print_json(orjson.dumps(cfg.to_dict()).decode())

    def _setup_log(self) -> None:
        handler = _LogFile(self.out / "run.log", encoding="utf-8")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root = logging.getLogger("sanctuary_local")
        for h in list(root.handlers):
            if isinstance(h, logging.FileHandler):
                root.removeHandler(h)
                h.close()
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        self._handler = handler

    @contextmanager
    def stage(self, name: str, n: int) -> Iterator[StageTracker]:
        log.info("stage %s: %d claims", name, n)
        tracker = StageTracker(name, self.stats[name], self.progress, n, self._progress_manifest)
        t, n0 = time.perf_counter(), self.stats[name]["n"]
        self._running[name] = t
        try:
            yield tracker
        finally:
            self._running.pop(name, None)
            dt = time.perf_counter() - t
            done = self.stats[name]["n"] - n0
            self.stats[name]["total_s"] += dt
            self.stats[name]["last_per_claim_s"] = dt / max(1, n)
            if done == n:
                log.info("stage %s: %.1f s for %d claims", name, dt, n)
            else:  # stopped early (interrupted, or a storage error)
                log.info("stage %s: %.1f s, stopped after %d of %d claims", name, dt, done, n)
            try:
                self.write_manifest()
            except OSError:  # the stage's own error (disk full…) is the one to report
                pass

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
        from sanctuary_local.io.predictions import predictions_to_leaderboard, write_predictions_json
        from sanctuary_local.io.leaderboard import write_leaderboard_csv

        write_predictions_json(preds, self.out / "predictions.json")
        write_leaderboard_csv(predictions_to_leaderboard(preds), self.out / "submission.csv")
        files = {"hyde": hyde, "retrieval": evidence, "verdict": verdict}
        if followup is not None:
            files["followup"] = followup
        if decompose is not None:
            files["decompose"] = decompose
        timings = self._timings(preds, files)
        n_selected = len(preds) if n_selected is None else n_selected
        timings = {"complete": len(preds) == n_selected, "n_selected": n_selected, **timings}
        _dump(self.out / "timings.json", timings)
        self.write_manifest("complete" if timings["complete"] else "interrupted")
        self._handler.flush()
        return timings

    def _timings(self, preds: list[Prediction], files: dict[str, StageFile]) -> dict[str, Any]:
        idx = [p.claim_index for p in preds]
        stages: dict[str, Any] = {}
        for name, st in self.stats.items():
            secs = [float(files[name].extras.get(i, {}).get("seconds", 0.0)) for i in idx]
            stages[name] = {
                "total_s": round(st["total_s"], 3), "load_s": round(st["load_s"], 3), "claims_this_run": st["n"],
                "per_claim": _dist(secs), "tokens_in": st["tokens_in"], "tokens_out": st["tokens_out"],
                "tokens_per_s_out": round(st["tokens_out"] / st["total_s"], 2) if st["total_s"] else None,
            }
        wall = time.perf_counter() - self.t0
        out: dict[str, Any] = {
            "n_claims": len(preds), "wall_s": round(wall, 3),
            "wall_s_per_claim": round(wall / len(preds), 3) if preds else None,
            "peak_rss_mb": peak_rss_mb(), "gpu": self.gpu.report(), "stages": stages,
        }
        if self.opts.budget_s:
            achieved = sum(stages[s]["per_claim"]["mean"] or 0.0 for s in stages)
            out["budget"] = {"budget_s_per_claim": self.opts.budget_s, "decisions": self.budget_notes,
                             "achieved_s_per_claim": round(wall / max(1, len(preds)), 3),
                             "achieved_stage_sum_s_per_claim": round(achieved, 3),
                             "levels": dict(Counter(str(p.meta.get("budget", {}).get("levels", {}).get("verdict", 0)) for p in preds))}
        return out

    def earlier_attempts(self) -> dict[str, Any]:
        """Wall seconds and per-stage ``{"total_s", "n"}`` of this run's earlier attempts."""
        return self.manifest.earlier_attempts()

    def write_manifest(self, status: str = "running") -> None:
        """``manifest.json`` now (``run_manifest.py``); a stage still running counts its seconds so far."""
        now = time.perf_counter()
        stages = {k: {"total_s": round(v["total_s"] + (now - self._running[k] if k in self._running else 0.0), 3),
                      "n": v["n"]} for k, v in self.stats.items()}
        self.manifest.write(stages, status)

    def _progress_manifest(self) -> None:
        """After a finished claim: the manifest again when it is ``MANIFEST_EVERY_S`` old
        (what a killed run spent is then known to within that, for ``--budget-s``)."""
        if self.manifest.age() >= MANIFEST_EVERY_S:
            try:
                self.write_manifest()
            except OSError:  # the stage file written next reports a full disk
                pass

    def print_summary(self, s: RunSummary) -> None:
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
        self.console.print(t)
        log.info("done: %d claims, %d degraded %s", s.n_claims, s.n_degraded, s.degraded_reasons)


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


def _dist(xs: list[float]) -> dict[str, float | None]:
    if not xs:
        return {"mean": None, "p50": None, "p95": None}
    s = sorted(xs)
    p95 = s[min(len(s) - 1, int(round(0.95 * (len(s) - 1))))]
    return {"mean": round(statistics.fmean(s), 4), "p50": round(statistics.median(s), 4), "p95": round(p95, 4)}
