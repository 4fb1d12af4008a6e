"""Readers' leases on an index generation: a rerun of ``index`` never removes a generation
that a check, a run or ``serve`` still reads.

An open ``CorpusIndex`` holds a shared ``flock`` on its generation's ``manifest.json``
(``take``) until it is closed or collected. ``index`` removes a replaced generation only when
it can take an exclusive one (``remove_unless_read``), holding it while it removes the
folder; a generation in use stays, and the next ``index`` run removes it once its readers
have ended. Without this, a run's retrieval workers, which open the run's generation by its
path when they start (``index.pinned``), found it removed and flagged their claims
``store_missing``. ``flock`` locks are advisory and local; where the file system has none
(some network mounts), an index is read without a lease, as before.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
from pathlib import Path

__all__ = ["release", "remove_unless_read", "take"]

_MANIFEST = "manifest.json"
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
#: What ``flock`` raises where the file system cannot lock: removed without a lease check, as before.
_NO_LOCKS = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}


def take(folder: Path) -> int | None:
    """A shared lease on the generation ``folder`` (a descriptor to ``release``); -1 where the
    file system has no locks; None when the generation is gone, or was removed while this
    waited for an ``index`` run that was removing it."""
    try:
        fd = os.open(Path(folder) / _MANIFEST, _OPEN)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # waits only while an index run removes this very generation
        here = os.stat(Path(folder) / _MANIFEST, follow_symlinks=False)
    except FileNotFoundError:
        os.close(fd)
        return None
    except OSError:  # no locks on this file system (ENOLCK, EOPNOTSUPP...): read on without a lease
        os.close(fd)
        return -1
    mine = os.fstat(fd)
    if (here.st_dev, here.st_ino) != (mine.st_dev, mine.st_ino):  # removed (and remade) meanwhile
        os.close(fd)
        return None
    return fd


def release(fd: int | None) -> None:
    """Drop a lease ``take`` gave (closing the descriptor drops the lock)."""
    if fd is not None and fd >= 0:
        os.close(fd)


def remove_unless_read(folder: Path) -> bool:
    """Remove the generation ``folder`` unless an open index reads it; True when removed.
    A folder without a manifest (a generation a stopped run left unfinished) has no reader."""
    try:
        fd = os.open(Path(folder) / _MANIFEST, _OPEN)
    except OSError:
        shutil.rmtree(folder, ignore_errors=True)
        return True
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # a reader holds it: the next index run removes it
        except OSError as exc:
            if exc.errno not in _NO_LOCKS:
                raise
        shutil.rmtree(folder, ignore_errors=True)  # under the lock: a reader waiting in ``take`` sees it gone
        return True
    finally:
        os.close(fd)
