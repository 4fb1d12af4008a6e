"""Checks on disk: one folder per check under ``DATA/checks/``, so a restart loses nothing.

``DATA/checks/<id>/check.json`` is the check's record (``CheckRecord``: the claim, its
status, progress, timings, why it failed), replaced atomically on every change;
``claim.json`` is the one-claim claims file its run reads and ``run/`` the run's own
folder (the crash-safe stage files, ``predictions.json``, ``run.log``), as ``check``
writes them. Ids are the check's number in order of arrival, zero-padded (``000001``).

At start (``CheckStore.recover``) a check left ``queued`` or ``running`` by a server that
stopped (SIGTERM, ``kill -9``, a crash) is queued again and its run resumes from its stage
files, with a note saying so; one the server died under ``MAX_KILLS`` times (``running``
at start) is marked failed with that reason instead of being run again (it may be what
kills the server). A check a graceful stop interrupted is left ``queued`` and simply resumes.
``DATA/serve.lock`` (``flock``) keeps a second server off the same folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import threading
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import orjson

from sanctuary_local.errors import UserError
from sanctuary_local.io.safe_io import atomic_write_bytes, read_regular

__all__ = ["ACTIVE", "CheckRecord", "CheckStore", "ID_PATTERN", "MAX_KILLS"]

#: A check id as the URLs carry it.
ID_PATTERN = re.compile(r"[0-9]{6,12}")
#: Statuses of a check that is not finished.
ACTIVE = ("queued", "running")
#: Server deaths during one check after which a restart marks it failed instead of running it again.
MAX_KILLS = 3
#: Largest ``check.json`` read back (a record is a few hundred bytes).
MAX_RECORD_BYTES = 1 << 20


@dataclass
class CheckRecord:
    """One check: what was asked, where it stands, and how it ended."""

    id: str
    claim: str
    claim_date: str | None = None
    """As typed (``YYYY-MM-DD``), or None."""
    status: str = "queued"
    """queued | running | done | failed."""
    created: float = 0.0
    started: float | None = None
    finished: float | None = None
    stage: str | None = None
    """The stage running now (``hyde``, ``retrieval``, ``verdict`` …) while ``running``."""
    stage_started: float | None = None
    stage_seconds: dict[str, float] = field(default_factory=dict)
    """Seconds each finished stage took (the ETA of later checks is made from these)."""
    attempts: int = 0
    """How many times a worker started this check (a restart resumes it)."""
    kills: int = 0
    """How many times the server died (was killed, crashed) while this check ran."""
    label: str | None = None
    """The verdict, once done."""
    error: str = ""
    """Why it failed."""
    notes: list[str] = field(default_factory=list)
    """What happened on the way (e.g. resumed after the server stopped mid-check)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CheckRecord:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


def _lock(data: Path) -> tuple[int, bool]:
    """``DATA/serve.lock`` (made with ``DATA`` if missing), held with ``flock``, and whether
    this call made the file; a one-line ``UserError`` when the folder cannot be used or
    another server holds it. Taken before ``checks/`` is made: a start refused here leaves
    at most empty folders."""
    path = data / "serve.lock"
    try:
        data.mkdir(parents=True, exist_ok=True)
        made = not os.path.lexists(path)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise UserError(f"--data {data}: cannot use it: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise UserError(f"--data {data}: another `sanctuary-local serve` uses this folder") from None
    return fd, made


class CheckStore:
    """Every check of one ``--data`` folder: read at start, each change written at once."""

    def __init__(self, data: Path) -> None:
        self.data = Path(data)
        self.dir = self.data / "checks"
        self._lock_fd, made = _lock(self.data)
        try:
            self.dir.mkdir(exist_ok=True)
        except OSError as exc:  # e.g. a full disk: leave --data as it was found
            if made:
                with contextlib.suppress(OSError):
                    os.unlink(self.data / "serve.lock")  # still held: no other server can be using it
            os.close(self._lock_fd)
            raise UserError(f"--data {self.data}: cannot use it: {exc.strerror or exc}") from None
        self._mutex = threading.Lock()
        self.records: dict[str, CheckRecord] = {}
        self.skipped: list[str] = []
        """Folders under ``checks/`` that hold no readable record (named at start, left alone)."""
        for sub in sorted(self.dir.iterdir()):
            rec = self._read(sub)
            if rec is not None:
                self.records[rec.id] = rec
            elif not sub.name.startswith("."):
                self.skipped.append(sub.name)

    def _read(self, folder: Path) -> CheckRecord | None:
        if not ID_PATTERN.fullmatch(folder.name) or folder.is_symlink() or not folder.is_dir():
            return None
        try:
            rec = CheckRecord.from_dict(orjson.loads(read_regular(folder / "check.json", MAX_RECORD_BYTES, "check record")))
        except (OSError, UserError, orjson.JSONDecodeError, TypeError):
            return None
        return rec if rec.id == folder.name else None

    # ---------------------------------------------------------------- paths
    def folder(self, check_id: str) -> Path:
        return self.dir / check_id

    def run_dir(self, check_id: str) -> Path:
        return self.folder(check_id) / "run"

    def predictions_path(self, check_id: str) -> Path:
        return self.run_dir(check_id) / "predictions.json"

    # ---------------------------------------------------------------- changes
    def create(self, claim: str, claim_date: str | None) -> CheckRecord:
        """A new queued check with the next id; its record and claims file are on disk when this returns."""
        with self._mutex:
            number = max((int(i) for i in self.records), default=0) + 1
            rec = CheckRecord(id=f"{number:06d}", claim=claim, claim_date=claim_date, created=time.time())
            self.records[rec.id] = rec
        folder = self.folder(rec.id)
        folder.mkdir(parents=True, exist_ok=True)
        iso = None if claim_date is None else "-".join(reversed(claim_date.split("-")))  # the claims file's DD-MM-YYYY
        atomic_write_bytes(folder / "claim.json", orjson.dumps([{"claim": claim, "claim_date": iso}]))
        self.save(rec)
        return rec

    def save(self, rec: CheckRecord) -> None:
        """Write ``rec``'s record (atomically: a kill leaves the old one or the new one)."""
        with self._mutex:
            atomic_write_bytes(self.folder(rec.id) / "check.json", orjson.dumps(rec.to_dict(), option=orjson.OPT_INDENT_2))

    def get(self, check_id: str) -> CheckRecord | None:
        return self.records.get(check_id) if ID_PATTERN.fullmatch(check_id) else None

    def newest_first(self) -> list[CheckRecord]:
        return sorted(self.records.values(), key=lambda r: r.id, reverse=True)

    def active(self) -> list[CheckRecord]:
        """The checks not finished, oldest first (the queue's order)."""
        return sorted((r for r in self.records.values() if r.status in ACTIVE), key=lambda r: r.id)

    def recover(self) -> list[CheckRecord]:
        """The checks a stopped server left unfinished, ready to queue again (see the module docstring)."""
        todo = []
        for rec in self.active():
            if rec.status == "running":  # the server died under it
                rec.kills += 1
                where = f"stage {rec.stage}" if rec.stage else "its start"
                if rec.kills >= MAX_KILLS:
                    rec.status, rec.finished = "failed", time.time()
                    rec.error = (f"the server stopped {rec.kills} times while this check ran (last during {where}: "
                                 "killed, crashed or out of memory); it is not run again")
                    rec.stage = rec.stage_started = None
                    self.save(rec)
                    continue
                rec.notes.append(f"the server stopped during {where}: resumed from its saved stages")
                rec.status, rec.stage, rec.stage_started = "queued", None, None
                self.save(rec)
            todo.append(rec)
        return todo

    def close(self) -> None:
        try:
            os.close(self._lock_fd)  # releases the flock
        except OSError:
            pass
