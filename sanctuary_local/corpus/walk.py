"""The files of a folder, recursively, and the members of the zip archives in it.

``list_folder`` lists the folder first (``Entry``: a name, its real path, its size; or
``WalkProblem``) without reading anything; ``read_entry`` then gives one entry's
``SourceFile`` (a path relative to the folder, its size, a way to read its bytes), or
for a zip archive its members one by one, read from the open archive file: an archive
is streamed (zipfile seeks in the file) and closed when its last member is taken, not
held in memory until the run ends. A ``WalkProblem`` is something that is not read: a
FIFO, a broken or encrypted archive, a file over its cap. Order is sorted and stable, so
two walks of the same folder give the same index. Hidden entries (a name starting with ".") and the index's own
folder are not walked; nested archives are reported, not opened (no zip bombs by nesting).

Symbolic links: a link to a file is followed only when its target lies inside the
folder (``follow_links=True`` follows every file link): a link to ``/etc/passwd`` in a
folder someone else wrote must not put that file into the index. A link to a folder is
never followed (no cycles, nothing outside). Both are listed as skipped, with the reason.
A file is opened without following a link (``O_NOFOLLOW`` on its real path), so a file
swapped for a link during the run is not followed either.
"""

from __future__ import annotations

import errno
import lzma
import os
import zipfile
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from sanctuary_local.corpus.extract import EXTRACTORS, Failed, Skipped, kind_of
from sanctuary_local.corpus.limits import MAX_FILE_BYTES, Limits
from sanctuary_local.corpus.names import display_name
from sanctuary_local.errors import UserError
from sanctuary_local.io.safe_io import NotRegularFile, open_regular

__all__ = ["Entry", "SourceFile", "WalkProblem", "list_folder", "read_entry", "walk", "MAX_FILE_BYTES"]

#: What reading a damaged, encrypted or unsupported zip member raises: a corrupt LZMA
#: stream raises ``LZMAError``, a local header whose name is flagged UTF-8 but is not
#: raises ``UnicodeDecodeError`` (a ``ValueError``).
_ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, lzma.LZMAError, EOFError, RuntimeError, NotImplementedError, OSError,
               ValueError)


@dataclass(frozen=True)
class SourceFile:
    """A file to extract: ``path`` relative to the folder (``a.zip!/dir/b.pdf`` in an
    archive), undecodable bytes of its name spelled ``\\xNN`` (``names.display_name``)."""

    path: str
    size: int
    read: Callable[[], bytes]
    flags: tuple[str, ...] = ()
    """What the walk noticed (a zip member listed more than once: ``zip_duplicate_entries:N``)."""


@dataclass(frozen=True, slots=True)
class WalkProblem:
    """A file that is not read; ``status`` is ``skipped`` or ``failed``."""

    path: str
    status: str
    reason: str


def _open(path: Path):
    """``path`` opened for reading, never through a link (it is a real path: a link there
    now was put there during the run), never blocking: the type is checked again on the
    opened descriptor (``O_NONBLOCK`` + ``fstat``), so a file that became a FIFO or a
    device since the folder was listed is ``Skipped``, not a stop of the whole run."""
    try:
        return open_regular(path, follow=False)
    except NotRegularFile as exc:
        raise Skipped(f"not a regular file: it is now {exc.kind} (changed during the run)") from None
    except UserError:
        raise Skipped("became a symbolic link during the run (not followed)") from None


def read_capped(fh, cap: int, size: int) -> bytes:
    """At most ``cap + 1`` bytes of ``fh`` (one more than the cap tells "too big"), in
    reads of the expected ``size`` and then 1 MiB: ``read(cap + 1)`` allocates the whole
    cap (64 MiB) up front for every file, however small."""
    chunks, got, want = [], 0, size + 1
    while got <= cap:
        data = fh.read(min(want, cap + 1 - got))
        if not data:
            break
        chunks.append(data)
        got, want = got + len(data), 1 << 20
    return b"".join(chunks)  # one chunk (the usual case) is returned as it is, not copied


def _read_file(path: Path, cap: int, size: int) -> Callable[[], bytes]:
    def read() -> bytes:
        with _open(path) as fh:
            return read_capped(fh, cap, size)

    return read


@dataclass(frozen=True, slots=True)
class Entry:
    """A file found in the folder: ``path`` as stored and printed, ``full`` the real path
    to open (a followed link's target), ``size`` when listed."""

    path: str
    full: Path
    size: int


def list_folder(root: Path, *, exclude: Path | None = None, limits: Limits = Limits()) -> list[Entry | WalkProblem]:
    """Every file under ``root`` (sorted, a folder's files before its subfolders), or why
    it is not read; nothing is opened yet. Iterative: a folder nested thousands deep is
    listed like any other (``os.walk`` recursed, and Python's recursion limit stopped the run)."""
    root = Path(root)
    real_root = os.path.realpath(root)
    skip = _identity(exclude) if exclude is not None else None
    found: list[Entry | WalkProblem] = []
    stack = [root]
    while stack:
        here = stack.pop()
        try:
            with os.scandir(here) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            found.append(WalkProblem(_rel(here, root), "failed", f"folder cannot be read: {exc.strerror or exc}"))
            continue
        subdirs = []
        for entry in entries:
            if entry.name.startswith("."):
                continue
            full = here / entry.name
            if entry.is_dir(follow_symlinks=False):
                if skip is None or _identity(full) != skip:
                    subdirs.append(full)
            else:
                found.append(_entry(full, _rel(full, root), limits, real_root))
        stack.extend(reversed(subdirs))
    return found


def read_entry(entry: Entry | WalkProblem, limits: Limits = Limits()) -> Iterator[SourceFile | WalkProblem]:
    """The file to extract, or for a zip archive its members one by one, read from the
    open archive file (streamed: the archive is closed when its last member has been
    taken, and a member's ``read`` is valid only until the next one is taken)."""
    if isinstance(entry, WalkProblem):
        yield entry
    elif entry.full.suffix.lower() == ".zip":
        yield from _members(entry.full, entry.path, limits, entry.size)
    else:
        yield _unsupported(entry.path) or SourceFile(entry.path, entry.size,
                                                                 _read_file(entry.full, limits.max_file_bytes, entry.size))


def walk(root: Path, *, exclude: Path | None = None, limits: Limits = Limits()) -> Iterator[SourceFile | WalkProblem]:
    """Every file under ``root`` and every member of its archives (``list_folder``, then
    ``read_entry`` for each)."""
    for entry in list_folder(root, exclude=exclude, limits=limits):
        yield from read_entry(entry, limits)


def _identity(path: Path | None) -> tuple[int, int] | None:
    """(device, inode) of ``path``, None when it cannot be read."""
    try:
        st = os.stat(path)  # type: ignore[arg-type]
    except (OSError, TypeError):
        return None
    return st.st_dev, st.st_ino


def _rel(full: Path, root: Path) -> str:
    """The name as stored and printed: relative, an undecodable byte spelled \\xNN (valid JSON)."""
    return display_name(full.relative_to(root).as_posix())


#: Kernel pseudo-file systems: their "regular" files report size 0 and may block a read
#: for ever (``/proc/kmsg`` waits for kernel messages), so no link is followed into them.
_KERNEL_FILES = ("/proc/", "/sys/")


def _link_target(full: Path, rel: str, real_root: str, follow_links: bool) -> Path | WalkProblem:
    """The real path a file link leads to, or why it is not followed."""
    try:
        target = os.path.realpath(full, strict=True)
    except OSError as exc:  # ELOOP: links that lead back to themselves; otherwise the target is missing
        why = "a loop of symbolic links" if exc.errno == errno.ELOOP else "its target does not exist"
        return WalkProblem(rel, "skipped", f"broken symbolic link ({why})")
    if os.path.isdir(target):
        return WalkProblem(rel, "skipped", "symbolic link to a folder (not followed)")
    if target.startswith(_KERNEL_FILES):  # regular files whose read can block forever (/proc/kmsg)
        return WalkProblem(rel, "skipped", "symbolic link to a kernel file in /proc or /sys (not followed)")
    if not follow_links and os.path.commonpath([real_root, target]) != real_root:
        return WalkProblem(rel, "skipped", "symbolic link to a file outside the folder (not followed; "
                                           "--follow-links follows it)")
    return Path(target)


def _unsupported(path: str) -> WalkProblem | None:
    """Skipped before a byte is read: no extractor reads this type."""
    if kind_of(path) in EXTRACTORS:
        return None
    return WalkProblem(path, "skipped", f"unsupported file type ({kind_of(path) or 'no extension'})")


def _entry(full: Path, rel: str, limits: Limits, real_root: str) -> Entry | WalkProblem:
    """One listed name: a file to read, or why not (a link not followed, not a regular
    file, over its size cap: ``max_archive_bytes`` for a zip, ``max_file_bytes`` else)."""
    if full.is_symlink():
        target = _link_target(full, rel, real_root, limits.follow_links)
        if isinstance(target, WalkProblem):
            return target
        full = target
    try:
        st = full.stat()
    except OSError as exc:
        return WalkProblem(rel, "failed", f"cannot be read: {exc.strerror or exc}")
    if not full.is_file():
        return WalkProblem(rel, "skipped", "not a regular file")
    cap = limits.max_archive_bytes if full.suffix.lower() == ".zip" else limits.max_file_bytes
    if st.st_size > cap:
        return WalkProblem(rel, "skipped", f"over the size cap ({st.st_size} > {cap} bytes)")
    return Entry(rel, full, st.st_size)


def _members(full: Path, rel: str, limits: Limits, size: int) -> Iterator[SourceFile | WalkProblem]:
    """The members of one archive, each name once (the first of its entries), until
    their uncompressed total reaches ``limits.max_archive_bytes``."""
    if size == 0:
        yield WalkProblem(rel, "skipped", "empty (0-byte zip archive)")
        return
    try:
        fh = _open(full)
    except Skipped as exc:
        yield WalkProblem(rel, "skipped", str(exc))
        return
    except OSError as exc:
        yield WalkProblem(rel, "failed", f"cannot be read: {exc.strerror or exc}")
        return
    with fh:  # open while its members are read, one by one (zipfile seeks; nothing held in memory)
        try:
            zf = zipfile.ZipFile(fh)
            infos = sorted(zf.infolist(), key=lambda i: i.filename)
        except _ZIP_ERRORS as exc:
            yield WalkProblem(rel, "failed", f"broken zip archive ({exc})"[:300])
            return
        with zf:
            yield from _member_files(zf, infos, rel, limits)


def _member_files(zf: zipfile.ZipFile, infos: list[zipfile.ZipInfo], rel: str,
                  limits: Limits) -> Iterator[SourceFile | WalkProblem]:
    entries = Counter(i.filename for i in infos)
    seen: set[str] = set()
    total = 0  # uncompressed bytes of the members read so far
    for info in infos:
        name = info.filename
        base = name.rsplit("/", 1)[-1]
        if name in seen or info.is_dir() or not base or base.startswith(".") or "__MACOSX" in name:
            continue
        seen.add(name)
        path = f"{rel}!/{name}"
        problem = _member_problem(info, path, limits, total)
        if problem is not None:
            yield problem
            continue
        total += info.file_size
        flags = (f"zip_duplicate_entries:{entries[name] - 1}",) if entries[name] > 1 else ()
        yield SourceFile(path, info.file_size, _member_reader(zf, info, limits.max_file_bytes), flags)


def _member_problem(info: zipfile.ZipInfo, path: str, limits: Limits, total: int) -> WalkProblem | None:
    """Why one archive member is not read, or None (``total``: bytes read before it)."""
    if info.flag_bits & 0x1:
        return WalkProblem(path, "failed", "encrypted zip member (needs a password)")
    if info.filename.lower().endswith(".zip"):
        return WalkProblem(path, "skipped", "nested archive (not opened)")
    if info.file_size > limits.max_file_bytes:
        return WalkProblem(path, "skipped", f"over the size cap ({info.file_size} > {limits.max_file_bytes} bytes)")
    if _unsupported(path) is not None:
        return _unsupported(path)
    if total + info.file_size > limits.max_archive_bytes:
        return WalkProblem(path, "skipped", f"over the archive's cap: its members read so far expand to {total} "
                                            f"bytes, this one would pass {limits.max_archive_bytes}")
    return None


def _member_reader(zf: zipfile.ZipFile, info: zipfile.ZipInfo, cap: int) -> Callable[[], bytes]:
    def read() -> bytes:
        try:
            with zf.open(info) as fh:
                return read_capped(fh, cap, info.file_size)
        except _ZIP_ERRORS as exc:
            raise Failed(f"damaged zip member ({exc})"[:300]) from None

    return read
