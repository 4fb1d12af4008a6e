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

``delete_check`` removes a check: its folder is first renamed to ``checks/.deleted-<id>-…``
(one atomic rename inside ``checks/``, never across a symlink: after it no restart can read
the record), then removed without following any link; a start finishes a removal a crash cut
short. ``checks/.last-id`` keeps the highest id ever given, so a deleted check's id (and URL)
never names another check. A record marked ``cancelled`` (deleted while it ran) is deleted at start.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import secrets
import shutil
import stat
import threading
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import orjson

from sanctuary_local.errors import UserError
from sanctuary_local.io.safe_io import atomic_write_bytes, fsync_dir, read_regular

__all__ = ["ACTIVE", "CheckRecord", "CheckStore", "ID_PATTERN", "MAX_KILLS", "delete_check"]

#: A check id as the URLs carry it.
ID_PATTERN = re.compile(r"[0-9]{6,12}")
#: Statuses of a check that is not finished.
ACTIVE = ("queued", "running")
#: Server deaths during one check after which a restart marks it failed instead of running it again.
MAX_KILLS = 3
#: Largest ``check.json`` read back (a record is a few hundred bytes).
MAX_RECORD_BYTES = 1 << 20
#: Prefix of a check folder being deleted (``delete_check``), and the file of the highest id given.
TRASH, LAST_ID = ".deleted-", ".last-id"

log = logging.getLogger("sanctuary_local")


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
    cancelled: bool = False
    """Deleted while it ran: it is deleted once it stops (or at the next start)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CheckRecord:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


def _read_high(path: Path) -> int:
    """The highest id given so far (``checks/.last-id``; 0 when missing or unreadable)."""
    try:
        return int(read_regular(path, 32, "last id", follow=False).decode().strip())
    except (OSError, UserError, ValueError):
        return 0


def _remove(path: Path) -> None:
    """Remove a renamed-away check folder; a link is unlinked, never followed."""
    try:
        if path.is_symlink() or not path.is_dir():
            os.unlink(path)
        else:
            shutil.rmtree(path)  # fd-based on Linux: a link inside is removed, not followed
    except OSError as exc:  # left for the next start to finish
        log.warning("serve: could not remove %s: %s", path, exc)


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
        self._high = _read_high(self.dir / LAST_ID)
        for sub in sorted(self.dir.iterdir()):
            rec = _read_record(sub)
            if rec is not None:
                self.records[rec.id] = rec
            elif sub.name.startswith(TRASH):  # a delete a crash cut short
                _remove(sub)
            elif not sub.name.startswith("."):
                self.skipped.append(sub.name)

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
            number = max([self._high, *map(int, self.records)]) + 1
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
            if self.records.get(rec.id) is not rec:  # deleted: writing it would bring its folder back
                return
            atomic_write_bytes(self.folder(rec.id) / "check.json", orjson.dumps(rec.to_dict(), option=orjson.OPT_INDENT_2))

    def get(self, check_id: str) -> CheckRecord | None:
        return self.records.get(check_id) if ID_PATTERN.fullmatch(check_id) else None

    def active(self) -> list[CheckRecord]:
        """The checks not finished, oldest first (the queue's order; by number: ``1000000`` after ``999999``)."""
        return sorted((r for r in self.records.values() if r.status in ACTIVE), key=lambda r: int(r.id))

    def recover(self) -> list[CheckRecord]:
        """The checks a stopped server left unfinished, ready to queue again (see the module docstring)."""
        for rec in [r for r in self.records.values() if r.cancelled]:  # deleted while it ran, then the server stopped
            with contextlib.suppress(UserError, OSError):
                delete_check(self, rec.id)
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


def delete_check(store: CheckStore, check_id: str) -> bool:
    """Remove a check, its record and its run (see the module docstring); False when there
    is no such check. A ``checks/`` or check folder that is a symlink, or that resolves
    outside ``--data``, is a ``UserError`` and nothing is removed."""
    with store._mutex:
        if store.get(check_id) is None:
            return False
        folder = store.folder(check_id)
        data = os.path.realpath(store.data)
        if (store.dir.is_symlink() or os.path.dirname(os.path.realpath(folder)) != os.path.join(data, "checks")
                or not stat.S_ISDIR(os.lstat(folder).st_mode)):
            raise UserError(f"check {check_id}: its folder is a link or lies outside --data {store.data}; left alone")
        store._high = max(store._high, int(check_id))
        atomic_write_bytes(store.dir / LAST_ID, str(store._high).encode())  # before: an id is never given twice
        trash = store.dir / f"{TRASH}{check_id}-{secrets.token_hex(4)}"
        os.rename(folder, trash)  # the commit point: no record is read back from a .deleted- folder
        fsync_dir(store.dir)
        del store.records[check_id]
    _remove(trash)
    return True


def _read_record(folder: Path) -> CheckRecord | None:
    if not ID_PATTERN.fullmatch(folder.name) or folder.is_symlink() or not folder.is_dir():
        return None
    try:
        rec = CheckRecord.from_dict(orjson.loads(read_regular(folder / "check.json", MAX_RECORD_BYTES, "check record")))
    except (OSError, UserError, orjson.JSONDecodeError, TypeError):
        return None
    return rec if rec.id == folder.name else None
