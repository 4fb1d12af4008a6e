"""Child processes that never outlive the run (Linux; a no-op elsewhere).

Two layers, because no single one covers every way a parent can die:

* ``die_with_parent()`` — called first thing in a child we control (the retrieval pool's
  worker initializer). It asks the kernel for ``SIGKILL`` when the parent dies
  (``prctl(PR_SET_PDEATHSIG)``: works even while the child is busy in C code) and starts
  a watchdog thread that polls ``os.getppid()``, which also catches a parent that was
  already gone before the ``prctl`` (the child was still booting).
* ``OrphanGuard`` — a tiny watcher process started by ``sanctuary-local run``. It snapshots
  the run's descendants twice a second (any of them: pool workers, the
  ``multiprocessing`` resource tracker, a vLLM engine core, a server a backend starts) and,
  when the run dies by any means (``kill -9``, the OOM killer), sends them ``SIGTERM``,
  then ``SIGKILL`` to those still alive after a grace period. It covers processes that
  third-party code spawns, where no initializer of ours runs.

``popen_kwargs()`` gives ``subprocess.Popen`` arguments for a server or engine the run
starts itself (none today): the kernel sends it ``SIGTERM`` when the run dies.

This module imports only the standard library: the guard runs it as a script.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
#: How often the watchdogs look at their parent (seconds).
POLL_S = 0.5
#: Seconds the guard waits between SIGTERM and SIGKILL.
GRACE_S = 3.0

_prctl: Any = None
if sys.platform.startswith("linux"):
    try:  # resolved at import, so a preexec_fn never loads a library in a forked child
        _prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # pragma: no cover - exotic libc
        _prctl = None


def set_pdeathsig(sig: int) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent *thread* exits.

    The kernel's "parent" is the thread that forked us: a child started from a thread
    that exits before the process does gets ``sig`` early. Start long-lived children
    from the main thread (``ProcessPoolExecutor`` spawns from the submitting thread and
    its manager thread, both alive as long as the pool). Returns False where unsupported."""
    if _prctl is None:
        return False
    return _prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0


def die_with_parent(parent_pid: int | None = None, poll_s: float = POLL_S) -> None:
    """Make this process exit (``SIGKILL``) within ``poll_s`` seconds of its parent's death.

    For ``ProcessPoolExecutor(initializer=...)``/``multiprocessing`` children: ``parent_pid``
    defaults to ``multiprocessing.parent_process()`` (the pid that started us, even if it
    has died meanwhile), else ``os.getppid()``."""
    if parent_pid is None:
        import multiprocessing

        parent = multiprocessing.parent_process()
        parent_pid = parent.pid if parent is not None and parent.pid else os.getppid()
    set_pdeathsig(signal.SIGKILL)
    if os.getppid() != parent_pid:  # died before the prctl: the kernel will not tell us
        os.kill(os.getpid(), signal.SIGKILL)

    def watch() -> None:
        while True:
            time.sleep(poll_s)
            if os.getppid() != parent_pid:
                os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="die-with-parent", daemon=True).start()


def _preexec_pdeathsig(parent_pid: int, sig: int) -> None:
    set_pdeathsig(sig)
    if os.getppid() != parent_pid:
        os._exit(1)


def popen_kwargs(sig: int = signal.SIGTERM) -> dict[str, Any]:
    """``subprocess.Popen(cmd, **popen_kwargs())``: the child (e.g. ``vllm serve``, a llama.cpp
    server) gets ``sig`` when this process dies. Call it from the thread that will live as
    long as the child (see ``set_pdeathsig``). The pdeath signal survives ``exec``."""
    import functools

    return {"preexec_fn": functools.partial(_preexec_pdeathsig, os.getpid(), int(sig))}


# ------------------------------------------------------------------ /proc helpers
def _stat(pid: int) -> tuple[int, int, str] | None:
    """``(ppid, start time in clock ticks, state)`` of ``pid``, or None if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    fields = raw[raw.rfind(b")") + 2 :].split()
    return int(fields[1]), int(fields[19]), fields[0].decode()


def process_table() -> dict[int, tuple[int, int, str]]:
    """Every live process: pid → ``(ppid, start time, state)``."""
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (st := _stat(int(name))) is not None:
            table[int(name)] = st
    return table


def descendants(pid: int, table: dict[int, tuple[int, int, str]] | None = None) -> dict[int, int]:
    """Live (non-zombie) descendants of ``pid``: pid → start time."""
    table = process_table() if table is None else table
    children: dict[int, list[int]] = {}
    for p, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(p)
    out: dict[int, int] = {}
    todo = list(children.get(pid, []))
    while todo:
        p = todo.pop()
        if p in out:
            continue
        if table[p][2] != "Z":
            out[p] = table[p][1]
        todo.extend(children.get(p, []))
    return out


def session_members(sid: int) -> dict[int, str]:
    """Live (non-zombie) processes of session ``sid``: pid → command line. A run started
    as a session leader (``start_new_session=True``) and everything it spawned."""
    out = {}
    for pid, (_, _, state) in process_table().items():
        try:
            if state != "Z" and os.getsid(pid) == sid:
                out[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # gone meanwhile
            continue
    return out


def alive(procs: dict[int, int]) -> dict[int, int]:
    """The entries of ``procs`` (pid → start time) still running as the same process."""
    out = {}
    for pid, start in procs.items():
        st = _stat(pid)
        if st is not None and st[1] == start and st[2] != "Z":
            out[pid] = start
    return out


def signal_all(procs: Iterable[int], sig: int) -> None:
    for pid in procs:
        try:
            os.kill(pid, sig)
        except OSError:  # already gone
            pass


def terminate(procs: dict[int, int], grace_s: float = GRACE_S) -> dict[int, int]:
    """SIGTERM ``procs``, SIGKILL those alive after ``grace_s``; returns those killed hard."""
    procs = alive(procs)
    signal_all(procs, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while procs and time.monotonic() < deadline:
        time.sleep(0.05)
        procs = alive(procs)
    signal_all(procs, signal.SIGKILL)
    return procs


# ----------------------------------------------------------------- the guard
_WAKE, _RELEASE = signal.SIGUSR1, signal.SIGUSR2


class OrphanGuard:
    """Context manager: while it is open, a watcher process kills this process's
    descendants if this process dies without closing it (see the module docstring).
    ``close()`` releases the watcher without killing anything. Linux only (a no-op
    elsewhere, or when ``/proc`` is unreadable)."""

    def __init__(self, poll_s: float = POLL_S, grace_s: float = GRACE_S) -> None:
        self.poll_s, self.grace_s = poll_s, grace_s
        self.proc: subprocess.Popen | None = None

    def start(self) -> OrphanGuard:
        if not Path("/proc/self/stat").exists() or self.proc is not None:
            return self
        cmd = [sys.executable, "-m", "sanctuary_local.procs", str(os.getpid()), str(self.poll_s), str(self.grace_s)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, close_fds=True)
        return self

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def close(self) -> None:
        if self.proc is None:
            return
        try:
            self.proc.send_signal(_RELEASE)
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):  # pragma: no cover - a stuck guard
            self.proc.kill()
        self.proc = None

    def __enter__(self) -> OrphanGuard:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _guard_main(parent: int, poll_s: float, grace_s: float) -> int:
    """The watcher: snapshot ``parent``'s descendants until it dies, then end them."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # Ctrl-C / a group SIGTERM is for the run to handle
    signal.pthread_sigmask(signal.SIG_BLOCK, {_WAKE, _RELEASE})
    set_pdeathsig(_WAKE)  # wakes us at once; the ppid poll decides
    me = os.getpid()
    known: dict[int, int] = {}
    while os.getppid() == parent:
        found = descendants(parent)
        found.pop(me, None)
        known = {**alive(known), **found}
        info = signal.sigtimedwait({_WAKE, _RELEASE}, poll_s)
        if info is not None and info.si_signo == _RELEASE:
            return 0  # the run closed the guard: it ended normally
    # Orphans were re-parented away from the run: end the snapshot plus anything they spawned.
    table = process_table()
    for pid in list(known):
        known.update(descendants(pid, table))
    known.pop(me, None)
    terminate(known, grace_s)
    return 0


def main(argv: list[str]) -> int:
    parent, poll_s, grace_s = int(argv[0]), float(argv[1]), float(argv[2])
    return _guard_main(parent, poll_s, grace_s)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
