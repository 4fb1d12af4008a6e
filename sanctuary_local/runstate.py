"""Crash-safe stage files: append-only JSONL, one line per finished claim, fsync'ed.

A run directory holds one ``stageN_*.jsonl`` per stage. Each line is
``{"claim_index": i, "record": {...}, "extra": {...}}``. On resume the finished claims
are read back and skipped; a torn last line (the process was killed mid-write) is cut
off, so every claim ends up present exactly once. A write that fails (disk full,
read-only or vanished directory) is rolled back to the last whole line and raised as a
``StorageError`` naming the file and the cause. A stage file is never written through a
symlink (``O_NOFOLLOW``) and must be a regular file (a FIFO would hang the run): either is a
one-line ``UserError`` naming it (``io.safe_io``).

``run_state.json`` records the fingerprint of everything that changes results (config,
claims file, store); a rerun with another fingerprint refuses to mix with the old
partial results unless ``force`` is given (which clears them).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Generic, TypeVar

import orjson

from sanctuary_local.errors import StorageError, UserError
from sanctuary_local.io.safe_io import atomic_write_bytes, open_append, open_regular, read_regular

T = TypeVar("T")

STAGE_FILES = {
    "decompose": "stage0_decompose.jsonl",  # decompose.enabled (issue 15, mode 3)
    "hyde": "stage1_hyde.jsonl",
    "retrieval": "stage2_evidence.jsonl",
    # followup.enabled (issue 15, mode 2): the follow-up questions, then the evidence with
    # their round merged in (what stage 3 reads then).
    "followup_questions": "stage2b_followup_questions.jsonl",
    "followup": "stage2c_followup_evidence.jsonl",
    "verdict": "stage3_predictions.jsonl",
}
STATE_FILE = "run_state.json"
#: Largest ``run_state.json`` read (it holds a few hashes and paths).
MAX_STATE_BYTES = 1 << 20

_CAUSES = {
    errno.ENOSPC: "no space left on device (disk full)",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.ENOENT: "the output directory has disappeared",
    errno.EIO: "input/output error",
}


def storage_error(exc: OSError, path: Path | str | None = None) -> StorageError:
    """One line naming the file and the cause, and how to go on."""
    where = path or exc.filename or "the output directory"
    cause = _CAUSES.get(exc.errno or 0, exc.strerror or str(exc))
    return StorageError(f"cannot write {where}: {cause} [{errno.errorcode.get(exc.errno or 0, exc.errno)}]; "
                        "fix that, then rerun the same command to resume (finished claims are kept)")


class StageFile(Generic[T]):
    """Append-only, fsync'ed JSONL of one stage's records, keyed by claim index."""

    def __init__(self, path: Path, decode: Callable[[dict[str, Any]], T], repair: bool = True) -> None:
        self.path = path
        self._decode = decode
        self._repair = repair  # False: read only (another run's file is never cut)
        self.records: dict[int, T] = {}
        self.extras: dict[int, dict[str, Any]] = {}
        self.repaired_bytes = 0
        self._load()

    def _load(self) -> None:
        try:  # our own output is never read (or cut) through a symlink; another run's may be
            with open_regular(self.path, follow=not self._repair) as f:
                data = f.read()
        except FileNotFoundError:
            return
        good_end = 0
        pos = 0
        while pos < len(data):
            nl = data.find(b"\n", pos)
            if nl < 0:  # torn last line: no newline → never fully written
                break
            line = data[pos:nl]
            try:
                obj = orjson.loads(line)
                rec = self._decode(obj["record"])
            except Exception:  # a damaged line: stop here, everything after is redone
                break
            idx = int(obj["claim_index"])
            self.records.setdefault(idx, rec)  # first write wins: exactly once
            self.extras.setdefault(idx, obj.get("extra") or {})
            pos = good_end = nl + 1
        if good_end < len(data) and self._repair:
            self.repaired_bytes = len(data) - good_end
            fd = os.open(self.path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                os.ftruncate(fd, good_end)
                os.fsync(fd)
            finally:
                os.close(fd)

    def sibling(self, path: Path) -> StageFile[T]:
        """The same stage's file of another run, read only (with this file's decoder): a torn
        last line there is skipped, not cut, so a source run still being written is left alone."""
        return StageFile(path, self._decode, repair=False)

    def __contains__(self, claim_index: int) -> bool:
        return claim_index in self.records

    def append(self, claim_index: int, record: Any, extra: dict[str, Any] | None = None) -> None:
        """Persist one finished record (flush + fsync before returning)."""
        if claim_index in self.records:
            return
        line = orjson.dumps(
            {"claim_index": claim_index, "record": record.to_dict(), "extra": extra or {}},
            option=orjson.OPT_SERIALIZE_NUMPY,
        )
        try:
            _append_line(self.path, line + b"\n")
        except OSError as exc:
            raise storage_error(exc, self.path) from exc
        self.records[claim_index] = record
        self.extras[claim_index] = extra or {}

    def pending(self, indices: Iterable[int]) -> list[int]:
        return [i for i in indices if i not in self.records]


def _append_line(path: Path, data: bytes) -> None:
    """Append ``data`` and fsync; on failure cut the file back to where it was, so a
    failed write never leaves half a line behind (best effort: the loader also repairs)."""
    fd = open_append(path)  # no symlink, no FIFO; created 0o666 & ~umask
    try:
        start = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except OSError:
            try:
                os.ftruncate(fd, start)
                os.fsync(fd)
            except OSError:
                pass
            raise
    finally:
        os.close(fd)


def remove_temp_files(out: Path) -> list[Path]:
    """Delete the temp files (``.NAME.*.tmp``, see ``atomic_write_bytes``) an interrupted
    run left in ``out``. Only the run's main process writes into ``out``, and one run
    at a time uses a directory, so any such file is stale."""
    removed = []
    for p in out.glob(".*.tmp"):
        try:
            p.unlink()
            removed.append(p)
        except FileNotFoundError:
            pass
    return removed


def check_state(out: Path, fingerprint: dict[str, Any], force: bool) -> None:
    """Refuse to mix partial results of a different configuration (unless ``force``);
    remove temp files an interrupted run left behind."""
    out.mkdir(parents=True, exist_ok=True)
    remove_temp_files(out)
    state_path = out / STATE_FILE
    try:
        raw: bytes | None = read_regular(state_path, MAX_STATE_BYTES, "run state")
    except FileNotFoundError:
        raw = None
    if raw is not None:
        try:
            old = orjson.loads(raw)
        except orjson.JSONDecodeError:
            old = {}
        old = old if isinstance(old, dict) else {}
        if old.get("fingerprint") != fingerprint:
            changed = sorted(k for k in set(old.get("fingerprint", {})) | set(fingerprint)
                             if old.get("fingerprint", {}).get(k) != fingerprint.get(k))
            if not force:
                raise UserError(
                    f"{out} holds results of a different run (changed: {', '.join(changed) or 'unknown'}). "
                    "Use another --out, or --force to discard the old partial results."
                )
            clear_stage_files(out)
    elif force:
        clear_stage_files(out)
    atomic_write_bytes(state_path, orjson.dumps({"fingerprint": fingerprint}, option=orjson.OPT_INDENT_2))


def clear_stage_files(out: Path) -> None:
    for name in STAGE_FILES.values():
        (out / name).unlink(missing_ok=True)
