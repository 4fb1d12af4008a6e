"""Child processes never outlive the run: ``die_with_parent`` (pool initializer),
``popen_kwargs`` (servers we start) and ``OrphanGuard`` (anything else), each checked by
SIGKILLing a real parent process and scanning /proc for its session."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sanctuary_local import procs

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")


def session_procs(sid: int) -> dict[int, str]:
    return procs.session_members(sid)


def wait_gone(sid: int, timeout: float) -> dict[int, str]:
    deadline = time.monotonic() + timeout
    while (left := session_procs(sid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _start(script: str, tmp_path: Path, n_expected: int) -> subprocess.Popen:
    """Run ``script`` as the leader of a new session; wait until it prints 'ready' and
    ``n_expected`` processes of its session are up."""
    path = tmp_path / "parent.py"
    path.write_text(textwrap.dedent(script))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, str(path)], stdout=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    deadline = time.monotonic() + 60
    while len(session_procs(proc.pid)) < n_expected and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(session_procs(proc.pid)) >= n_expected, session_procs(proc.pid)
    return proc


POOL = """
    import os, sys, time
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context
    from sanctuary_local.procs import die_with_parent

    def busy(_):
        while True:  # a worker in the middle of a claim
            sum(range(10000))

    if __name__ == "__main__":
        pool = ProcessPoolExecutor(2, mp_context=get_context("spawn"), initializer=die_with_parent, initargs=(os.getpid(),))
        futures = [pool.submit(busy, i) for i in range(2)]
        time.sleep(1.0)  # let both workers take their task
        print("ready", flush=True)
        time.sleep(600)
"""


def test_pool_workers_die_with_a_killed_parent(tmp_path: Path) -> None:
    proc = _start(POOL, tmp_path, n_expected=4)  # parent, resource tracker, 2 workers
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    left = wait_gone(proc.pid, timeout=5)
    # The resource tracker is not a worker: it exits once no process holds its pipe.
    assert left == {}, left


SERVER = """
    import subprocess, time
    from sanctuary_local.procs import popen_kwargs

    subprocess.Popen(["sleep", "600"], **popen_kwargs())
    print("ready", flush=True)
    time.sleep(600)
"""


def test_a_server_started_with_popen_kwargs_dies_with_its_parent(tmp_path: Path) -> None:
    proc = _start(SERVER, tmp_path, n_expected=2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert wait_gone(proc.pid, timeout=5) == {}


GUARDED = """
    import subprocess, sys, time
    from sanctuary_local.procs import OrphanGuard

    guard = OrphanGuard(poll_s=0.2, grace_s=1.0).start()
    # Children nothing of ours initialises (think of a vLLM engine core), one a grandchild.
    subprocess.Popen(["sleep", "600"])
    subprocess.Popen(["sh", "-c", "sleep 600 & wait"])
    time.sleep(0.6)  # one guard snapshot
    print("ready", flush=True)
    if sys.argv[-1:] == ["release"]:
        guard.close()
    time.sleep(600)
"""


def test_orphan_guard_ends_children_of_a_killed_run(tmp_path: Path) -> None:
    proc = _start(GUARDED, tmp_path, n_expected=5)  # parent, guard, sleep, sh, its sleep
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert wait_gone(proc.pid, timeout=5) == {}


def test_orphan_guard_close_releases_it_without_killing(tmp_path: Path) -> None:
    path = tmp_path / "parent.py"
    path.write_text(textwrap.dedent(GUARDED))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, str(path), "release"], stdout=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 10
        while any("sanctuary_local.procs" in c for c in session_procs(proc.pid).values()) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = session_procs(proc.pid)
        assert not any("sanctuary_local.procs" in c for c in left.values()), left  # the guard is gone
        assert sum(c.startswith("sleep 600") for c in left.values()) == 2  # its children were left alone
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_descendants_walks_the_tree_and_skips_zombies() -> None:
    child = subprocess.Popen(["sh", "-c", "sleep 30 & wait"])
    try:
        deadline = time.monotonic() + 5
        while len(procs.descendants(os.getpid())) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        found = procs.descendants(os.getpid())
        assert child.pid in found and len(found) >= 2
        assert procs.alive(found) == found
    finally:
        procs.signal_all(procs.descendants(os.getpid()), signal.SIGKILL)
        child.wait()
    assert child.pid not in procs.descendants(os.getpid())
    assert child.pid not in procs.alive({child.pid: found[child.pid]})


def test_every_process_pool_in_the_code_uses_die_with_parent() -> None:
    """Each pool the package or a benchmark script starts makes its workers die with it:
    bench_retrieval's Pool(1) once left a worker alive for an hour after a kill -9."""
    import re

    starts = re.compile(r"\b(ProcessPoolExecutor|Pool)\(")
    files = [p for d in ("sanctuary_local", "benchmarks") for p in sorted((ROOT / d).rglob("*.py"))]
    offenders = [p.relative_to(ROOT).as_posix() for p in files
                 if starts.search(p.read_text("utf-8")) and "die_with_parent" not in p.read_text("utf-8")]
    checked = [p for p in files if starts.search(p.read_text("utf-8"))]
    assert len(checked) >= 3 and offenders == []
