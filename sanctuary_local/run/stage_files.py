"""Crash-safe stage files: append-only JSONL, one line per finished claim, fsync'ed.

A run directory holds one ``stageN_*.jsonl`` per stage. Each line is
``{"claim_index": i, "record": {...}, "extra": {...}}``. On resume the finished claims
are read back and skipped; a torn last line (the process was killed mid-write) is cut
off, so every claim ends up present exactly once. A write that fails (disk full,
read-only or vanished directory) is rolled back to the last whole line and raised as a
``StorageError`` naming the file and the cause. A stage file is never written through a
symlink (``O_NOFOLLOW``) and must be a regular file (a FIFO would hang the run): either is a
one-line ``UserError`` naming it (``io.safe_io``).

``run_state.json`` records the fingerprint of everything that decides results
(``fingerprint.py``: config less its execution settings, claims file, store content per
claim, code, libraries, prompts, models, trust file, budget). A rerun with another
fingerprint refuses to mix with the old results, naming what changed; ``force`` keeps
the completed claims (those with a stage-3 prediction) and redoes the rest under the new
fingerprint (the old one is kept in the file's ``history``); ``restart`` discards all.
"""

from __future__ import annotations

import errno
import hashlib
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Generic, TypeVar

import orjson

from sanctuary_local.errors import StorageError, UserError
from sanctuary_local.io.run_files import STAGE_FILES, complete_lines
from sanctuary_local.io.safe_io import atomic_write_bytes, open_append, open_regular, read_regular

T = TypeVar("T")

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
        self.records, self.extras, good_end = complete_lines(data, self._decode)
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


def run_identity(out: Path, cfg: Any, claims_sha256: str, store: Any, indices: list[int], opts: Any) -> dict[str, Any]:
    """Fingerprint the run (``fingerprint.run_fingerprint``), check it against ``out``'s
    (``check_state``, honouring ``opts.force`` and ``opts.restart``) and return
    ``{"fingerprint": …, "code": …}`` for the manifest."""
    from sanctuary_local.run.fingerprint import HashCache, code_identity, run_fingerprint

    out.mkdir(parents=True, exist_ok=True)
    code = code_identity()
    fp = run_fingerprint(cfg, claims_sha256, store, indices, HashCache.for_run(out), opts.budget_s, code)
    fp = check_state(out, fp, opts.force, getattr(opts, "restart", False), str(Path(store.path).resolve()))
    return {"fingerprint": fp, "code": code}


def fingerprint_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What differs between two run fingerprints, one name each (``prompts.verdict``,
    ``store (claims 3, 7)``). The store is compared on the claims both hold: a run may
    grow its ``--claims-range`` and resume."""
    changed: list[str] = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if key == "store" and isinstance(a, dict) and isinstance(b, dict):
            diff = sorted((i for i in a.keys() & b.keys() if a[i] != b[i]), key=lambda i: (len(i), i))
            if diff:
                changed.append(f"store (claims {', '.join(diff[:10])}{' …' if len(diff) > 10 else ''})")
        elif isinstance(a, dict) and isinstance(b, dict):
            changed += [f"{key}.{sub}" for sub in sorted(set(a) | set(b)) if a.get(sub) != b.get(sub)]
        elif a != b:
            changed.append(key)
    return changed


def _read_state(path: Path) -> dict[str, Any]:
    try:
        raw = read_regular(path, MAX_STATE_BYTES, "run state")
    except FileNotFoundError:
        return {}
    try:
        old = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {"fingerprint": {"unreadable": True}}
    return old if isinstance(old, dict) else {"fingerprint": {"unreadable": True}}


def check_state(out: Path, fingerprint: dict[str, Any], force: bool, restart: bool = False,
                store_path: str | None = None) -> dict[str, Any]:
    """Refuse to mix results of a different fingerprint (see the module docstring);
    remove temp files an interrupted run left behind. Returns the fingerprint written
    (its store map merged with the claims earlier attempts recorded). ``store_path`` is
    recorded beside it (where ``report`` finds the pages), not part of it."""
    out.mkdir(parents=True, exist_ok=True)
    remove_temp_files(out)
    state_path = out / STATE_FILE
    old = _read_state(state_path)
    history = old.get("history") if isinstance(old.get("history"), list) else []
    old_fp = old.get("fingerprint") if isinstance(old.get("fingerprint"), dict) else {}
    if old_fp.get("unreadable"):
        changed = [f"{STATE_FILE} is unreadable"]
    else:
        changed = fingerprint_changes(old_fp, fingerprint) if old else []
    if restart:
        clear_stage_files(out)
        (out / "manifest.json").unlink(missing_ok=True)  # its attempts (spent budget) go too
        history = []
    elif changed:
        completed = completed_claims(out)
        if not force:
            raise UserError(
                f"{out} holds results of a different run (changed: {', '.join(changed)}). Use another --out; "
                f"or --force to keep its {len(completed)} completed claims and redo the rest with this run's "
                "settings; or --restart to discard all its results."
            )
        keep_claims(out, completed)
        history = [*history, {"fingerprint": _summary(old_fp), "changed": changed, "kept_claims": sorted(completed)}]
    elif isinstance(old_fp.get("store"), dict) and isinstance(fingerprint.get("store"), dict):
        fingerprint = {**fingerprint, "store": {**old_fp["store"], **fingerprint["store"]}}
    state: dict[str, Any] = {"fingerprint": fingerprint}
    if store_path:
        state["store_path"] = store_path
    if history:
        state["history"] = history
    atomic_write_bytes(state_path, orjson.dumps(state, option=orjson.OPT_INDENT_2))
    return fingerprint


def _summary(fp: dict[str, Any]) -> dict[str, Any]:
    """A fingerprint with its per-claim store map reduced to one hash (history stays small)."""
    store = fp.get("store")
    if isinstance(store, dict):
        fp = {**fp, "store": hashlib.sha256(orjson.dumps(store, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]}
    return fp


def _lines(path: Path) -> list[bytes]:
    try:
        with open_regular(path, follow=False) as f:
            data = f.read()
    except FileNotFoundError:
        return []
    return [line + b"\n" for line in data.split(b"\n") if line.strip()]


def completed_claims(out: Path) -> set[int]:
    """Claim indices with a stage-3 prediction in ``out``."""
    done: set[int] = set()
    for line in _lines(out / STAGE_FILES["verdict"]):
        try:
            done.add(int(orjson.loads(line)["claim_index"]))
        except Exception:  # noqa: BLE001 - a torn line: not completed
            continue
    return done


def keep_claims(out: Path, claims: set[int]) -> None:
    """Cut every stage file of ``out`` down to the lines of ``claims`` (atomically)."""
    for name in STAGE_FILES.values():
        path = out / name
        lines = _lines(path)
        if not lines:
            continue
        kept = []
        for line in lines:
            try:
                if int(orjson.loads(line)["claim_index"]) in claims:
                    kept.append(line)
            except Exception:  # noqa: BLE001 - a damaged line is dropped with the rest
                continue
        atomic_write_bytes(path, b"".join(kept))


def clear_stage_files(out: Path) -> None:
    for name in STAGE_FILES.values():
        (out / name).unlink(missing_ok=True)
