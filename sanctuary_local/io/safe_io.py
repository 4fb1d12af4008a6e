"""Reading files that may be hostile, and writing outputs that must not follow a planted link.

Reading (issue 27, defect 3): ``open_regular`` refuses anything that is not a regular
file *before* reading a byte. A FIFO would block forever and ``/dev/zero`` never ends, so
the path is opened with ``O_NONBLOCK`` (opening a FIFO then does not wait for a writer)
and the *opened descriptor* is checked with ``fstat`` (no race between the check and the
read). ``read_regular`` adds a size cap, read without loading more than the cap.

Writing (defects 2 and 11): ``atomic_write_bytes`` writes a temp file in the destination's
directory and renames it over the destination, so a symlink planted at the destination is
replaced, never followed, and a reader never sees half a file; the temp file gets the mode
a plain ``open`` would give (``0o666 & ~umask``, e.g. 0644 under umask 022), not
mkstemp's 0600. ``open_append`` opens a file to append to with ``O_NOFOLLOW``: a symlink
there is refused with a one-line ``UserError`` naming the path.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
import threading
from pathlib import Path
from typing import BinaryIO

from sanctuary_local.errors import UserError

__all__ = ["NotRegularFile", "atomic_write_bytes", "current_umask", "file_kind", "fsync_dir", "open_append",
           "open_regular", "read_regular"]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_UMASK_LOCK = threading.Lock()
_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"),
          (stat.S_ISLNK, "a symbolic link"))


class NotRegularFile(UserError):
    """A FIFO, device, socket or directory where a regular file is expected; ``kind`` says which."""

    def __init__(self, path: str | Path, kind: str) -> None:
        super().__init__(f"{path}: is {kind}, not a regular file")
        self.kind = kind


def file_kind(mode: int) -> str:
    """``st_mode`` → "a FIFO (named pipe)", "a character device", … ("a regular file")."""
    for test, name in _KINDS:
        if test(mode):
            return name
    return "a regular file" if stat.S_ISREG(mode) else "a special file"


def _symlink_error(path: str | Path, exc: OSError, doing: str) -> UserError | OSError:
    """ELOOP from O_NOFOLLOW (EMLINK on some BSDs) on a symlink → a one-line UserError."""
    if exc.errno in (errno.ELOOP, errno.EMLINK) and os.path.islink(path):
        return UserError(f"{path}: is a symbolic link; refusing to {doing} through it (remove the link)")
    return exc


def _check_regular(fd: int, path: str | Path) -> None:
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise NotRegularFile(path, file_kind(mode))


def open_regular(path: str | Path, *, follow: bool = True) -> BinaryIO:
    """Open ``path`` for binary reading; ``NotRegularFile`` when it is not a regular file
    (checked on the opened descriptor, never blocking on a FIFO). ``follow=False``: a
    symlink at ``path`` is refused (``UserError``). Other failures raise ``OSError``."""
    try:
        fd = os.open(path, os.O_RDONLY | _NONBLOCK | _CLOEXEC | (0 if follow else _NOFOLLOW))
    except OSError as exc:
        raise (_symlink_error(path, exc, "read") if not follow else exc) from None
    _check_regular(fd, path)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_regular(path: str | Path, limit: int | None = None, what: str = "file", *, follow: bool = True) -> bytes:
    """The bytes of regular file ``path``: a ``UserError`` naming it when it holds more
    than ``limit`` bytes (at most ``limit + 1`` bytes are ever read)."""
    with open_regular(path, follow=follow) as f:
        data = f.read() if limit is None else f.read(limit + 1)
    if limit is not None and len(data) > limit:
        raise UserError(f"{path}: {what} is larger than {limit} bytes; refusing to read it")
    return data


def open_append(path: str | Path) -> int:
    """A descriptor appending to regular file ``path`` (created with ``0o666 & ~umask``);
    a symlink or a non-regular file at ``path`` is a one-line ``UserError``."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | _CLOEXEC | _NOFOLLOW | _NONBLOCK
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:
        raise _symlink_error(path, exc, "write") from None
    _check_regular(fd, path)
    os.set_blocking(fd, True)
    return fd


def current_umask() -> int:
    """The process umask, read without changing it where /proc tells it (Linux ≥ 4.7);
    else set and restored under a lock."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def atomic_write_bytes(path: Path, data: bytes, mode: int | None = None) -> Path:
    """Write ``data`` to ``path`` via a temp file in the same directory (``mode``, by default
    ``0o666 & ~umask``, set before anything is written), fsync, rename: a symlink at ``path``
    is replaced, not followed; on any failure the temp file is removed and ``path`` is as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), (0o666 & ~current_umask()) if mode is None else mode)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def fsync_dir(folder: str | Path) -> None:
    """Flush ``folder``'s entries (names created, renamed or removed in it) to disk."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
