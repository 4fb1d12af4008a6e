"""Graceful stop on Ctrl-C / SIGTERM.

The first SIGINT or SIGTERM only sets a flag: the pipeline finishes the claim in flight
(on vLLM: the batch in flight; in the retrieval pool: the claims already started), writes
what is done and raises ``RunInterrupted``. A second signal stops at once: the process
terminates its children and exits immediately. Either way every finished claim is in the
fsync'ed stage files, and rerunning the same command resumes exactly once.

With ``grace_s`` (``check``: one claim, so "the claim in flight" is the whole job) the
first signal gives the run that many seconds to reach a stop point, then stops it as a
second signal would: a supervisor's SIGTERM (``kill``, ``docker stop``) ends it promptly
even while a generation runs in C code.

Exit code: 128 + the signal number (130 for SIGINT, 143 for SIGTERM), the shell's own
convention for "ended by this signal".
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any, NoReturn

from sanctuary_local import procs

__all__ = ["RunInterrupted", "StopRequest", "exit_code_for", "exit_stopped"]

SIGNALS = (signal.SIGINT, signal.SIGTERM)


def exit_code_for(signum: int) -> int:
    """128 + signum: 130 for SIGINT, 143 for SIGTERM."""
    return 128 + int(signum)


def exit_stopped(code: int) -> NoReturn:
    """End a stopped run now with ``code``, skipping interpreter shutdown: freeing the
    models and the native libraries' exit handlers can take a second, and partway through
    it Python puts back the default handlers, so a second Ctrl-C there killed the process
    by the signal (no exit 130, no resume hint). Stage files are fsync'ed already; the
    logs and stdio are flushed here. Call it after the ``StopRequest`` block has closed."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


class RunInterrupted(Exception):
    """The run stopped early on request; what was finished is saved."""

    def __init__(self, signum: int, done: int = 0, total: int = 0, stages: str = "") -> None:
        self.signum, self.done, self.total = int(signum), done, total
        super().__init__(f"interrupted by {signal.Signals(self.signum).name}: {done} of {total} claims finished"
                         + (f" ({stages})" if stages else ""))

    @property
    def exit_code(self) -> int:
        return exit_code_for(self.signum)


class StopRequest:
    """A stop flag set by the first SIGINT/SIGTERM (or by ``request``).

    Used as a context manager from the main thread, it takes over SIGINT and SIGTERM
    (no KeyboardInterrupt: a thread acts on them, see ``_watch``, through
    ``signal.set_wakeup_fd``, which it owns meanwhile) and restores the previous handlers
    on exit, unless a signal came: then a later one still stops at once; from another
    thread it is a plain flag. ``hint`` is printed when the process stops (the command to
    resume); ``exclude_pids`` are children a hard stop leaves alone (the orphan guard,
    which cleans up after us). ``grace_s``: after the first signal, the seconds the
    run has to stop by itself before a hard stop (None: as long as it takes);
    ``on_hard_stop`` runs just before a hard stop exits (e.g. removing a temporary folder)."""

    def __init__(self, hint: str = "", exclude_pids: tuple[int, ...] = (), grace_s: float | None = None,
                 on_hard_stop: Callable[[], None] | None = None) -> None:
        self.hint, self.exclude_pids, self.grace_s, self.on_hard_stop = hint, set(exclude_pids), grace_s, on_hard_stop
        self._timer: threading.Timer | None = None
        self.signum: int | None = None
        self._event = threading.Event()
        self._previous: dict[int, Any] = {}
        self._previous_fd, self._signalled = -1, False
        self._pipe: tuple[int, int] | None = None

    @property
    def requested(self) -> bool:
        return self._event.is_set()

    def request(self, signum: int = signal.SIGTERM) -> None:
        """Ask for a graceful stop (what the first signal does)."""
        if self.signum is None:
            self.signum = int(signum)
        self._event.set()

    # ------------------------------------------------------------------ signals
    def _on_signal(self, signum: int) -> None:
        if self.requested:
            self.hard_stop(signum)
        self._signalled = True
        self.request(signum)
        name = signal.Signals(signum).name
        if self.grace_s is None:
            _say(f"\n{name}: finishing the claim in flight, then saving and stopping (send it again to stop at once)\n")
            return
        _say(f"\n{name}: saving what is done and stopping (within {self.grace_s:g} s)\n")
        self._timer = threading.Timer(self.grace_s, self.hard_stop, (signum, "no stop point reached in time: stopping now"))
        self._timer.daemon = True
        self._timer.start()

    def hard_stop(self, signum: int, why: str = "again: stopping at once") -> None:
        """Stop now: end our child processes, print the resume hint, exit 128+signum.
        Stage files are fsync'ed line by line, so nothing finished is lost; a line cut
        in half is repaired on resume."""
        _say(f"\n{signal.Signals(signum).name} {why}.\n{self.hint}\n")
        if self.on_hard_stop is not None:
            try:
                self.on_hard_stop()
            except Exception:  # noqa: BLE001 - exiting anyway; the exit code says why
                pass
        kids = procs.descendants(os.getpid()) if os.path.exists("/proc/self/stat") else {}
        procs.signal_all((p for p in kids if p not in self.exclude_pids), signal.SIGTERM)
        os._exit(exit_code_for(signum))

    def _second_signal(self, signum: int, frame: FrameType | None) -> None:
        self.hard_stop(signum)

    def _watch(self, fd: int) -> None:
        """Acts on the signal numbers the C-level handler writes to the wakeup fd: this
        works while the main thread is deep in C code (a model load, a generation
        batch), where a Python-level handler would wait for it to return."""
        while chunk := _read(fd):
            for signum in chunk:
                if signum in SIGNALS:
                    self._on_signal(signum)
        os.close(fd)

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is not threading.main_thread():
            return self  # signal handlers can only be set from the main thread: flag only
        r, w = os.pipe()
        os.set_blocking(w, False)
        self._pipe = (r, w)
        self._previous_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        for sig in SIGNALS:  # no KeyboardInterrupt; the watcher thread does the work
            self._previous[sig] = signal.signal(sig, _ignore)
        threading.Thread(target=self._watch, args=(r,), name="stop-request", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._timer is not None:  # stopped by itself in time
            self._timer.cancel()
        if self._pipe is None:
            return
        for sig, handler in self._previous.items():
            # After a signal the process is on its way out: a second one still stops at
            # once (exit 128+signum), never a traceback or death by the signal.
            signal.signal(sig, self._second_signal if self._signalled else handler)
        self._previous.clear()
        signal.set_wakeup_fd(self._previous_fd)
        os.close(self._pipe[1])  # the watcher reads EOF and ends
        self._pipe = None


def _ignore(signum: int, frame: FrameType | None) -> None:
    """The Python-level handler: nothing (see ``StopRequest._watch``)."""


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 64)
    except OSError:
        return b""


def _say(text: str) -> None:
    """Write to stderr from a signal handler (unbuffered: no re-entrant buffered IO)."""
    try:
        os.write(2, text.encode("utf-8", "replace"))
    except OSError:
        pass
