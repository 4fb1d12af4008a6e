"""How the server ends: which signal stopped it, the one line it prints about the checks,
its exit code, and the end of every process it started.

uvicorn takes SIGINT and SIGTERM while it serves and raises the signal again once it has
stopped; ``SignalNote`` is the handler that then meets it, and notes it: the exit code is
128 + that signal (130 for Ctrl-C, 143 for SIGTERM), as for ``run``, ``check`` and
``index``. It stays installed until the process exits, so a second signal during the last
steps (closing the models, ending the children: at most about a second) is not a traceback.

``stop_line`` says truthfully what became of the checks: the one that ran was stopped at its
next stop point or left inside its model call; either way it is saved as queued with its
finished stages (the stage files), and the waiting ones stay queued on disk; all of them
resume when the server starts again on the same ``--data``.

``StartupStop`` covers the start before that (the settings and model checks, opening the index
and ``--data``): SIGTERM there is Ctrl-C's ``KeyboardInterrupt``, so what the start made is
undone as for Ctrl-C, one line says ``aborted`` and the exit code is 143 (130 for Ctrl-C); a
second signal meanwhile is only noted, so it cannot cut that clean-up short.

``end_children`` ends what is left of the processes the server started (a backend's server
and what it spawned, which need not die with their parent): SIGTERM, then SIGKILL after
``CHILD_GRACE_S``. The orphan guard is left out: it is released normally afterwards.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable
from pathlib import Path
from types import FrameType

from sanctuary_local import procs
from sanctuary_local.interrupt import exit_code_for
from sanctuary_local.serve.jobs import CheckStore

__all__ = ["CHILD_GRACE_S", "SignalNote", "StartupStop", "end_children", "stop_line"]

#: Seconds the server's remaining child processes get between SIGTERM and SIGKILL at exit.
CHILD_GRACE_S = 1.0
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class SignalNote:
    """The SIGINT/SIGTERM handler around uvicorn's own (see the module docstring): notes
    each signal it meets; ``signum`` is the first, or None."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def _note(self, signum: int, frame: FrameType | None) -> None:
        self.seen.append(int(signum))

    def install(self) -> SignalNote:
        for sig in SIGNALS:
            signal.signal(sig, self._note)
        return self

    @property
    def signum(self) -> int | None:
        # uvicorn raises the signals it caught last first: the first one it caught comes last
        return self.seen[-1] if self.seen else None

    @property
    def exit_code(self) -> int:
        return 0 if self.signum is None else exit_code_for(self.signum)


class StartupStop:
    """The SIGINT/SIGTERM handler while the server starts (see the module docstring): the first
    signal raises ``KeyboardInterrupt``, later ones are noted; ``SignalNote`` replaces it."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def _stop(self, signum: int, frame: FrameType | None) -> None:
        self.seen.append(int(signum))
        if len(self.seen) == 1:
            raise KeyboardInterrupt

    def install(self) -> StartupStop:
        for sig in SIGNALS:
            signal.signal(sig, self._stop)
        return self

    @property
    def exit_code(self) -> int:
        return exit_code_for(self.seen[0] if self.seen else signal.SIGINT)


def _checks(n: int) -> str:
    return f"{n} waiting check{'s' if n != 1 else ''} {'stays' if n == 1 else 'stay'} queued"


def stop_line(signum: int | None, store: CheckStore, interrupted: str | None, waiting: Iterable[str],
              data: Path) -> str:
    """The line printed once the server has stopped: what became of the check that ran
    (``interrupted``) and of the ``waiting`` ones."""
    head = "stopped" if signum is None else f"stopped ({signal.Signals(signum).name})"
    waiting = [i for i in waiting if i != interrupted]
    parts, queued = [], len(waiting)
    rec = store.get(interrupted) if interrupted is not None else None
    if interrupted is not None and rec is None:
        parts.append(f"check {interrupted}, cancelled while it ran, was deleted")
    elif rec is not None and rec.cancelled:
        parts.append(f"check {rec.id}, cancelled while it ran, is deleted at the next start")
    elif rec is not None and rec.status == "queued":
        parts.append(f"check {rec.id} was interrupted and saved as queued, its finished stages kept")
        queued += 1
    elif rec is not None:
        parts.append(f"check {rec.id} ended ({rec.status}) before the stop")
    if waiting:
        parts.append(_checks(len(waiting)))
    if not parts:
        return f"{head}: no check was running or waiting"
    if queued:
        parts.append(f"{'it resumes' if queued == 1 else 'they resume'} when `sanctuary-local serve` starts again "
                     f"with --data {data}")
    return f"{head}: " + "; ".join(parts)


def end_children(keep: Iterable[int | None] = ()) -> dict[int, int]:
    """End every live descendant of this process but ``keep`` (SIGTERM, then SIGKILL after
    ``CHILD_GRACE_S``); those that needed SIGKILL."""
    if not os.path.exists("/proc/self/stat"):
        return {}
    kept = set(keep)
    kids = {pid: start for pid, start in procs.descendants(os.getpid()).items() if pid not in kept}
    return procs.terminate(kids, CHILD_GRACE_S)
