"""Crash-proof runs, with the real CPU models (``tests/data/tiny_cpu_trained.toml``: the
0.5B for stage 1, MiniLM, the packaged trained verdict) and a 2-process retrieval pool, each run a ``sanctuary-local run`` subprocess in its own session:

* chaos: SIGKILL the run at seeded random points (at least ``KILLS`` times), resuming
  each time, until it finishes; after every kill no process of the run may be left
  (pool workers, resource tracker, orphan guard: a few seconds' grace), and every stage
  file holds each claim at most once; at the end, exactly once, no torn line, no temp file.
* graceful stop: one SIGTERM finishes the claim in flight, writes the outputs of the
  finished claims, prints the command to resume and exits 143; one Ctrl-C (SIGINT to the
  process group) during retrieval lets the claims in flight finish (no claim recorded
  as a failed worker) and exits 130; a second SIGINT stops at once (130); the resumed
  run finishes with every claim exactly once.

``SANCTUARY_CHAOS_KILLS`` / ``SANCTUARY_CHAOS_SEED`` change the number of kills and the
seed; ``SANCTUARY_TEST_PROFILE`` another profile (e.g. to try a different model).
"""

from __future__ import annotations

import os
import random
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from sanctuary_local import procs
from sanctuary_local.io.leaderboard import read_leaderboard_csv
from sanctuary_local.procs import session_members
from sanctuary_local.io.run_files import STAGE_FILES

#: The stage files of a run with the default config (the optional modes add more; off here).
RUN_FILES = [STAGE_FILES[s] for s in ("hyde", "retrieval", "verdict")]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
PROFILE = os.environ.get("SANCTUARY_TEST_PROFILE", str(ROOT / "tests" / "data" / "tiny_cpu_trained.toml"))
N = len(orjson.loads((EXAMPLES / "claims.json").read_bytes()))
KILLS = int(os.environ.get("SANCTUARY_CHAOS_KILLS", "10"))
SEED = int(os.environ.get("SANCTUARY_CHAOS_SEED", "16"))
#: Share of kills at a random moment after the run starts a stage (model/pool loading),
#: the others a random moment after its next finished claim (see ``kill_point``).
STARTUP_KILLS = 0.3
STARTUP_WINDOW_S = (0.5, 8.0)
WORK_WINDOW_S = (0.0, 3.0)
GRACE_S = 10.0  # for the run's processes to be gone after a kill
#: Longest wait for one run (minutes on a quiet 2-core machine; far more on a busy one).
TIMEOUT_S = float(os.environ.get("SANCTUARY_CHAOS_TIMEOUT_S", "3600"))

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc"),
]


def _exe() -> list[str]:
    script = Path(sys.executable).parent / "sanctuary-local"
    return [str(script)] if script.exists() else [sys.executable, "-m", "sanctuary_local.cli"]


#: Less work per claim than the test profile (2 questions, 2 snippets each, short
#: generations): what is tested is stopping and resuming, and every restart reloads models.
#: (``verdict.sampling`` counts only with an LLM verdict, e.g. SANCTUARY_TEST_PROFILE=tests/data/tiny_cpu.toml.)
LIGHT = ["--set", "hyde.min_questions=1", "--set", "hyde.max_questions=2", "--set", "hyde.sampling.max_tokens=96",
         "--set", "retrieval.max_snippets=2", "--set", "verdict.sampling.max_tokens=48"]


def command(out: Path) -> list[str]:
    return [*_exe(), "run", "--claims", str(EXAMPLES / "claims.json"), "--store", str(EXAMPLES / "store"),
            "--out", str(out), "--profile", PROFILE, "--workers", "2", "--quiet", *LIGHT]


class Run:
    """One ``sanctuary-local run`` as the leader of its own session."""

    started: list[Run] = []  # killed at teardown if a test fails half-way

    def __init__(self, out: Path) -> None:
        self.out = out
        self.log = out / "run.log"
        self.log_start = self.log.stat().st_size if self.log.exists() else 0
        self.stderr_path = out.parent / f"{out.name}.stderr"
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(command(out), stdout=subprocess.DEVNULL, stderr=err, start_new_session=True,
                                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.pid = self.proc.pid
        Run.started.append(self)

    def new_log(self) -> str:
        if not self.log.exists():
            return ""
        with open(self.log, "rb") as f:
            f.seek(self.log_start)
            return f.read().decode(errors="replace")

    def wait_for(self, text: str, timeout: float = TIMEOUT_S) -> bool:
        """True once this run has logged ``text``; False if it exited first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.new_log():
                return True
            if self.proc.poll() is not None:
                return False
            time.sleep(0.05)
        raise AssertionError(f"run did not log {text!r} within {timeout} s")

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def wait(self, timeout: float = TIMEOUT_S) -> int:
        return self.proc.wait(timeout=timeout)

    def assert_no_process_left(self) -> None:
        deadline = time.monotonic() + GRACE_S
        while (left := session_members(self.pid)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert left == {}, f"processes of the run still alive {GRACE_S} s after it ended: {left}"


@pytest.fixture(autouse=True)
def _kill_leftover_runs() -> Iterator[None]:
    yield
    for run in Run.started:  # a failed test must not leave a run working
        if run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait()
        procs.signal_all(session_members(run.pid), signal.SIGKILL)
    Run.started.clear()


def stage_lines(out: Path, strict: bool) -> dict[str, list[dict]]:
    """Parsed lines of each stage file. ``strict=False`` allows one torn last line (a
    kill -9 mid-write, repaired on resume); a claim may never appear twice."""
    found = {}
    assert not any((out / n).exists() for n in set(STAGE_FILES.values()) - set(RUN_FILES))
    for name in RUN_FILES:
        path = out / name
        data = path.read_bytes() if path.exists() else b""
        lines = data.split(b"\n")
        tail = lines.pop()  # b"" when the file ends with a newline
        assert strict is False or tail == b"", f"{name}: torn last line {tail[:80]!r}"
        found[name] = [orjson.loads(line) for line in lines]
        idx = [r["claim_index"] for r in found[name]]
        assert len(idx) == len(set(idx)), f"{name}: a claim twice: {idx}"
    return found


def assert_complete(out: Path) -> None:
    for name, rows in stage_lines(out, strict=True).items():
        assert sorted(r["claim_index"] for r in rows) == list(range(N)), name
    for r in stage_lines(out, strict=True)[STAGE_FILES["retrieval"]]:
        assert not any(f.startswith("retrieval_error: worker failed") for f in r["record"]["flags"]), r["record"]["flags"]
    preds = orjson.loads((out / "predictions.json").read_bytes())
    assert sorted(int(p["claim_id"]) for p in preds) == list(range(N))
    assert sorted(int(r.id) for r in read_leaderboard_csv(out / "submission.csv")) == list(range(N))
    assert orjson.loads((out / "timings.json").read_bytes())["complete"] is True
    assert list(out.glob(".*.tmp")) == []


def finish(out: Path) -> Run:
    run = Run(out)
    rc = run.wait()
    assert rc in (0, 3), run.stderr()[-3000:]
    run.assert_no_process_left()
    assert_complete(out)
    return run


def kill_point(run: Run, rng: random.Random) -> tuple[str, float] | None:
    """Wait for a seeded random point of ``run``'s work; None if it finished first.

    "startup": a random moment after the run logs its first stage (a model or the
    retrieval pool loading); "work": a random moment after the run's next finished claim
    (stage-file line), i.e. during the following claim, so that every such kill follows
    progress and the chaos ends in bounded time."""
    if rng.random() < STARTUP_KILLS:
        if not run.wait_for("INFO sanctuary_local: stage "):
            return None
        kind, delay = "startup", rng.uniform(*STARTUP_WINDOW_S)
    else:
        before = sum(len(v) for v in stage_lines(run.out, strict=False).values()) if run.out.exists() else 0
        while run.proc.poll() is None and (
                not run.out.exists() or sum(len(v) for v in stage_lines(run.out, strict=False).values()) <= before):
            time.sleep(0.05)
        kind, delay = "work", rng.uniform(*WORK_WINDOW_S)
    try:
        run.wait(timeout=delay)
        return None
    except subprocess.TimeoutExpired:
        return kind, round(delay, 2)


@pytest.mark.soak
def test_kill_9_at_random_points_then_resume(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    kills: list[tuple[int, str, float, dict[str, int]]] = []
    rounds = 0
    t0 = time.monotonic()
    while len(kills) < KILLS:  # a run that finishes before enough kills starts a new round
        rounds += 1
        out = tmp_path / f"round{rounds}"
        while len(kills) < KILLS:
            run = Run(out)
            point = kill_point(run, rng)
            if point is None:
                break  # the run finished first
            os.kill(run.pid, signal.SIGKILL)
            run.wait()
            run.assert_no_process_left()
            progress = {name.split("_")[0]: len(rows) for name, rows in stage_lines(out, strict=False).items()}
            kills.append((rounds, *point, progress))
        finish(out)
    print(f"\n{len(kills)} kills in {rounds} round(s), {time.monotonic() - t0:.0f} s"
          " (round, kind, seconds after the point, lines per stage file after the kill):")
    for k in kills:
        print("  ", k)


@pytest.mark.soak
def test_graceful_stop_then_stop_at_once_then_resume(tmp_path: Path) -> None:
    out = tmp_path / "graceful"
    hint = shlex.join(["sanctuary-local", *command(out)[len(_exe()):]])

    # 1. SIGTERM to the run once, during stage 1: the claim in flight finishes, then it stops.
    run = Run(out)
    assert run.wait_for("INFO sanctuary_local: stage hyde")
    deadline = time.monotonic() + TIMEOUT_S
    while not stage_lines(out, strict=False)[STAGE_FILES["hyde"]] and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(run.pid, signal.SIGTERM)
    at_signal = len(stage_lines(out, strict=False)[STAGE_FILES["hyde"]])
    assert run.wait() == 143, run.stderr()[-3000:]
    err = run.stderr().splitlines()
    i = next(k for k, ln in enumerate(err) if ln.startswith("to resume, run the same command again"))
    assert err[i] == f"to resume, run the same command again (from {os.getcwd()}):"
    assert err[i + 1].strip() == hint  # the exact command, shell-quoted
    run.assert_no_process_left()
    lines = stage_lines(out, strict=True)
    assert at_signal <= len(lines[STAGE_FILES["hyde"]]) <= at_signal + 1  # only the claim in flight was added
    assert lines[STAGE_FILES["retrieval"]] == lines[STAGE_FILES["verdict"]] == []
    assert orjson.loads((out / "predictions.json").read_bytes()) == []  # outputs for the finished claims: none yet
    timings = orjson.loads((out / "timings.json").read_bytes())
    assert timings["complete"] is False and timings["n_selected"] == N
    assert list(out.glob(".*.tmp")) == []

    # 2. Two SIGINTs while a question generation runs: the second stops at once. (Stage 1:
    #    a claim's generation takes seconds; the trained verdict finishes all 4 claims in about
    #    one, so Ctrl-C there is often over before a second one lands.)
    before = len(stage_lines(out, strict=False)[STAGE_FILES["hyde"]])
    assert before < N, "step 1 left no question generation to interrupt"
    run = Run(out)
    assert run.wait_for("INFO sanctuary_local: stage hyde")
    time.sleep(1.5)  # the model is loaded, a claim's generation is under way
    os.killpg(run.pid, signal.SIGINT)
    time.sleep(0.3)
    assert run.proc.poll() is None, "the run stopped before the second SIGINT: " + run.stderr()[-2000:]
    os.killpg(run.pid, signal.SIGINT)
    t = time.monotonic()
    assert run.wait(timeout=60) == 130, run.stderr()[-3000:]
    assert time.monotonic() - t < 5, "the second SIGINT did not stop the run at once"
    assert "again: stopping at once" in run.stderr() and hint in run.stderr()
    run.assert_no_process_left()
    lines = stage_lines(out, strict=False)
    assert before <= len(lines[STAGE_FILES["hyde"]]) <= before + 1 and lines[STAGE_FILES["retrieval"]] == []

    # 3. Ctrl-C (SIGINT to the process group) once while the retrieval pool works: the
    #    workers ignore it, the claims in flight finish and are recorded, exit 130.
    run = Run(out)
    assert run.wait_for("INFO sanctuary_local: stage retrieval")
    deadline = time.monotonic() + TIMEOUT_S  # the first retrieved claim: the workers are up
    while not stage_lines(out, strict=False)[STAGE_FILES["retrieval"]] and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(run.pid, signal.SIGINT)
    assert run.wait() == 130, run.stderr()[-3000:]
    assert hint in run.stderr()
    run.assert_no_process_left()
    lines = stage_lines(out, strict=True)
    assert len(lines[STAGE_FILES["hyde"]]) == N and lines[STAGE_FILES["verdict"]] == []
    for r in lines[STAGE_FILES["retrieval"]]:
        assert not any(f.startswith("retrieval_error") for f in r["record"]["flags"]), r["record"]["flags"]

    # 4. Resume to the end: every claim exactly once.
    finish(out)
