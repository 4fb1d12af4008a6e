"""StopRequest: the first SIGINT/SIGTERM sets a flag (no KeyboardInterrupt), a second one
exits at once with 128 + signum after printing the resume hint; handlers are restored."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sanctuary_local.interrupt import RunInterrupted, StopRequest, exit_code_for

ROOT = Path(__file__).resolve().parents[2]


def _wait(cond, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.01)
    return cond()


def test_handlers_are_restored_when_no_signal_came() -> None:
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with StopRequest(hint="resume hint") as stop:
        assert signal.getsignal(signal.SIGINT) != before[1]  # taken over meanwhile
        stop.request(signal.SIGTERM)  # a request from code is not a signal
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
    assert signal.set_wakeup_fd(-1) == -1  # the wakeup fd was handed back


FIRST_SCRIPT = """
    import os, signal, time
    from sanctuary_local.interrupt import StopRequest

    with StopRequest(hint="resume hint") as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        while not stop.requested:
            time.sleep(0.01)
    assert stop.signum == signal.SIGTERM
    assert signal.set_wakeup_fd(-1) == -1  # the wakeup fd was handed back
    print("flag only", flush=True)
"""


def test_first_signal_only_sets_the_flag(tmp_path: Path) -> None:
    path = tmp_path / "first.py"
    path.write_text(textwrap.dedent(FIRST_SCRIPT))
    res = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stderr
    assert "flag only" in res.stdout and "SIGTERM: finishing the claim in flight" in res.stderr


AFTER_SCRIPT = """
    import os, signal, time
    from sanctuary_local.interrupt import StopRequest

    with StopRequest(hint="RESUME WITH: same command") as stop:
        os.kill(os.getpid(), signal.SIGINT)
        while not stop.requested:
            time.sleep(0.01)
    print("saved; printing the summary", flush=True)
    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C again while the run winds down
    time.sleep(5)
    print("not reached")
"""


def test_a_second_signal_after_the_stop_point_still_stops_at_once(tmp_path: Path) -> None:
    """CI caught this: the run reached its stop point and restored Python's handlers, so
    the second Ctrl-C killed it by the signal (-2, no resume hint), not exit 130."""
    path = tmp_path / "after.py"
    path.write_text(textwrap.dedent(AFTER_SCRIPT))
    res = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 130, (res.returncode, res.stderr)
    assert "saved; printing the summary" in res.stdout and "not reached" not in res.stdout
    assert "SIGINT again: stopping at once" in res.stderr and "RESUME WITH: same command" in res.stderr
    assert "KeyboardInterrupt" not in res.stderr


def test_exit_codes_follow_the_shell_convention() -> None:
    assert exit_code_for(signal.SIGINT) == 130 and exit_code_for(signal.SIGTERM) == 143
    exc = RunInterrupted(signal.SIGINT, done=2, total=4, stages="stage 1 3/4")
    assert exc.exit_code == 130 and "2 of 4 claims finished (stage 1 3/4)" in str(exc)


SCRIPT = """
    import ctypes, os, signal, time
    from sanctuary_local.interrupt import StopRequest

    with StopRequest(hint="RESUME WITH: same command") as stop:
        os.kill(os.getpid(), signal.SIGINT)
        while not stop.requested:
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGINT)
        # The main thread stuck in C code (think of a model load) must not delay the stop.
        ctypes.CDLL(None).sleep(30)
    print("not reached")
"""


def test_second_signal_stops_at_once_even_inside_c_code(tmp_path: Path) -> None:
    path = tmp_path / "stop.py"
    path.write_text(textwrap.dedent(SCRIPT))
    t = time.monotonic()
    res = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert time.monotonic() - t < 20
    assert res.returncode == 130, res.stderr
    assert "SIGINT: finishing the claim in flight" in res.stderr
    assert "SIGINT again: stopping at once" in res.stderr and "RESUME WITH: same command" in res.stderr
    assert "not reached" not in res.stdout


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_request_from_code_is_the_same_flag(signum: int) -> None:
    stop = StopRequest()  # not entered: no handlers, a plain flag
    stop.request(signum)
    stop.request(signal.SIGTERM)  # the first reason is kept
    assert stop.requested and stop.signum == signum


GRACE_SCRIPT = """
    import ctypes, os, pathlib, signal, sys, time
    from sanctuary_local.interrupt import StopRequest

    marker = pathlib.Path(sys.argv[1])
    with StopRequest(hint="", grace_s=0.5, on_hard_stop=lambda: marker.write_text("cleaned")) as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        while not stop.requested:
            time.sleep(0.01)
        ctypes.CDLL(None).sleep(30)  # no stop point in sight: a generation in C code
    print("not reached")
"""


def test_a_grace_period_ends_a_run_without_a_stop_point(tmp_path: Path) -> None:
    """With ``grace_s`` one SIGTERM is enough: after the grace the process stops as on a
    second signal, running ``on_hard_stop`` first (``check`` removes its temporary folder)."""
    path, marker = tmp_path / "grace.py", tmp_path / "marker"
    path.write_text(textwrap.dedent(GRACE_SCRIPT))
    res = subprocess.run([sys.executable, str(path), str(marker)], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 143, res.stderr
    assert "SIGTERM: saving what is done and stopping (within 0.5 s)" in res.stderr
    assert "SIGTERM no stop point reached in time: stopping now." in res.stderr
    assert marker.read_text() == "cleaned" and "not reached" not in res.stdout
