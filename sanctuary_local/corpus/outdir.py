"""The index folder (``--out``): what ``index`` may write into, and never anything else.

``index`` replaces and deletes things in its folder (generations, ``CURRENT``, the
report), so it writes only into a folder it made. ``check_out`` accepts an absent or
empty folder, or one holding ``MARKER``, a small JSON file naming this tool and the
index format, written before anything else; an index made before the marker existed is
recognised by its ``CURRENT`` naming a generation whose manifest has this format.
Anything else is refused with one line: a folder holding other files (the user's
``gen-photos/`` or ``CURRENT`` must never be deleted or overwritten), the folder being
indexed itself, an index of another format. Inside an accepted folder, only names this
tool writes are ever touched (``generations`` lists ``gen-NNNNNN`` folders only, never
a link).

Durable: ``fsync_tree`` flushes a generation's files and its folder to disk before
``CURRENT`` names it, and ``fsync_dir`` the index folder after the switch, so a power
cut never leaves ``CURRENT`` naming a generation whose data is still in the page cache.

One run at a time: ``IndexLock`` holds ``flock(LOCK_EX)`` on ``LOCK_NAME`` for the whole
run, and a second run refuses at once with one line naming the first one's pid (two
runs used to write the same generation: doubled postings). The kernel drops the lock
when its holder dies, kill -9 included, so a crashed run never leaves the folder locked.
"""

from __future__ import annotations

import fcntl
import os
import re
import stat
from pathlib import Path

import orjson

from sanctuary_local.corpus.index import CURRENT, GEN_NAME, INDEX_FORMAT, MARKER, live_manifest
from sanctuary_local.corpus.names import printable
from sanctuary_local.errors import UserError
from sanctuary_local.io.safe_io import atomic_write_bytes, fsync_dir, read_regular

__all__ = ["MARKER", "LOCK_NAME", "REPORT_NAME", "IndexLock", "check_out", "fsync_dir", "fsync_tree", "generations",
           "write_marker"]

#: The lock file a run holds (``flock``) while it writes the index.
LOCK_NAME = "index.lock"
#: The last run's report.
REPORT_NAME = "index_report.json"
_MADE_BY = "sanctuary-local index"
_MARKER_TEMP = re.compile(rf"\.{re.escape(MARKER)}\.[^/]+\.tmp")


def _marker_format(out: Path) -> str | None:
    """The format a valid marker in ``out`` names; None when there is no marker."""
    path = out / MARKER
    if not os.path.lexists(path):
        return None
    try:
        data = orjson.loads(read_regular(path, 65536, "index marker", follow=False))
    except (OSError, UserError, orjson.JSONDecodeError):
        data = None
    if not isinstance(data, dict) or data.get("made_by") != _MADE_BY or not isinstance(data.get("format"), str):
        raise UserError(f"{out}: its {MARKER} was not written by `{_MADE_BY}`; give --out a new or empty folder")
    return data["format"]


def _legacy_format(out: Path) -> str | None:
    """The format of an index made before the marker (``CURRENT`` → ``gen-NNNNNN`` with a
    manifest); None when ``out`` does not hold one."""
    try:
        live = read_regular(out / CURRENT, 64, "CURRENT", follow=False).decode("ascii").strip()
        if not GEN_NAME.fullmatch(live) or os.path.islink(out / live):
            return None
        manifest = orjson.loads(read_regular(out / live / "manifest.json", 1 << 30, "manifest", follow=False))
    except (OSError, UserError, UnicodeDecodeError, orjson.JSONDecodeError):
        return None
    return manifest.get("format") if isinstance(manifest, dict) and isinstance(manifest.get("format"), str) else None


def check_out(out: Path, root: Path, other_folder: bool = False) -> bool:
    """Refuse (``UserError``, one line) an ``out`` that ``index`` must not write into;
    True when it already holds an index (marker or earlier index), False when it is
    absent or empty (module doc). An index of another folder is refused too, unless
    ``other_folder``: updating it from ``root`` would drop every document of that folder."""
    out, root = Path(out), Path(root)
    if not os.path.lexists(out):
        return False
    if not out.is_dir():
        raise UserError(f"{out}: --out is not a folder")
    if os.path.samefile(out, root):
        raise UserError(f"{out}: --out is the folder being indexed; give the index its own folder")
    fmt = _marker_format(out)
    if fmt is None:
        fmt = _legacy_format(out)
    if fmt is None:
        # a first run in progress has made only these so far (the marker's temp file: atomic_write_bytes)
        names = sorted(n for n in os.listdir(out) if n != LOCK_NAME and not _MARKER_TEMP.fullmatch(n))
        if not names:
            return False
        if MARKER in names:  # a run that holds the lock renamed its marker in since we read it
            fmt = _marker_format(out)
    if fmt is None:
        shown = ", ".join(repr(printable(n)) for n in names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        raise UserError(f"{out}: --out holds files that are not an index made by `{_MADE_BY}` ({shown}); "
                        f"give it a new or empty folder (nothing there is deleted or overwritten)")
    if fmt != INDEX_FORMAT:
        raise UserError(f"{out}: holds an index of format {fmt!r}, not this version's {INDEX_FORMAT!r}; "
                        f"index into a new folder, or delete this one first")
    if not other_folder:
        _check_same_folder(out, root)
    return True


def _check_same_folder(out: Path, root: Path) -> None:
    """Refuse to update the index of one folder from another (it would silently swap its
    documents): the live manifest's ``root`` must be ``root``. An index with no live
    generation yet (a first run that was stopped) has no folder to compare."""
    try:
        _, manifest = live_manifest(out)
    except UserError:
        return
    indexed, here = manifest.get("root"), str(root.resolve())
    if isinstance(indexed, str) and indexed != here:
        raise UserError(f"{out}: is the index of {printable(indexed)}, not of {printable(here)}; give this "
                        f"folder its own --out, or add --other-folder to make {out} an index of it instead "
                        f"(the documents of {printable(indexed)} leave it)")


def write_marker(out: Path) -> None:
    """Write ``MARKER`` (once: an existing valid one is kept)."""
    if not os.path.lexists(Path(out) / MARKER):
        atomic_write_bytes(Path(out) / MARKER, orjson.dumps({"made_by": _MADE_BY, "format": INDEX_FORMAT}) + b"\n")


def generations(out: Path) -> list[Path]:
    """The generation folders in ``out``: real folders named ``gen-NNNNNN`` (never a link,
    never another name: a user's ``gen-photos`` is not ours)."""
    found = []
    for p in Path(out).iterdir():
        if GEN_NAME.fullmatch(p.name) and not p.is_symlink() and p.is_dir():
            found.append(p)
    return sorted(found)


class IndexLock:
    """An exclusive, non-blocking ``flock`` on ``out/LOCK_NAME`` (module doc); a context
    manager. ``UserError`` when another process holds it."""

    def __init__(self, out: Path) -> None:
        path = Path(out) / LOCK_NAME
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            self.fd = os.open(path, flags, 0o666)
        except OSError as exc:
            raise UserError(f"{path}: cannot open the index's lock file: {exc.strerror or exc}") from None
        try:
            if not stat.S_ISREG(os.fstat(self.fd).st_mode):
                raise UserError(f"{path}: the index's lock file is not a regular file; remove it")
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(self.fd, 32, 0).decode("ascii", "replace").strip() or "?"
                raise UserError(f"{out}: another `{_MADE_BY}` run (pid {printable(holder)}) is writing this index; "
                                f"wait for it to end, or index into another --out") from None
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)
        except BaseException:
            os.close(self.fd)
            raise

    def release(self) -> None:
        """Unlock (closing the descriptor drops the lock)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> IndexLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def fsync_tree(folder: Path) -> None:
    """Flush every file directly in ``folder``, then the folder itself, to disk."""
    for p in sorted(Path(folder).iterdir()):
        if p.is_file() and not p.is_symlink():
            fd = os.open(p, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    fsync_dir(folder)
