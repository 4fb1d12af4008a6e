"""Reading a whole small input file (claims, predictions, leaderboard CSV) as UTF-8 text,
and writing outputs, with every failure turned into a ``UserError`` that names the file
(and line)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from sanctuary_local.errors import UserError

#: The UTF-8 byte order mark some editors (Notepad, Excel's "CSV UTF-8") put first.
UTF8_BOM = b"\xef\xbb\xbf"


def read_utf8(path: str | Path, what: str = "file") -> bytes:
    """The file's bytes, checked to be non-empty valid UTF-8, without a leading BOM.

    Non-UTF-8 bytes are an error (not replaced): these files are small, hand-made data,
    so silently mangling them would hide the mistake. A UTF-8 BOM is dropped (read as
    ``utf-8-sig``): it says nothing but "this is UTF-8"."""
    from sanctuary_local.io.safe_io import read_regular

    path = Path(path)
    try:
        raw = read_regular(path, what=what)  # a FIFO or a device is refused, never read (issue 27)
    except FileNotFoundError:
        raise UserError(f"{path}: {what} not found") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, expected a {what}") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read {what}: {exc.strerror}") from None
    raw = raw.removeprefix(UTF8_BOM)
    if not raw.strip():
        raise UserError(f"{path}: {what} is empty")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise UserError(f"{path}:{line}: not UTF-8 (byte offset {exc.start}: {exc.reason})") from None
    return raw


@contextmanager
def writing(path: str | Path, what: str = "output") -> Iterator[None]:
    """Turn an ``OSError`` raised while writing ``path`` (a file, or a directory of outputs)
    into one ``UserError`` line naming it: a read-only or full disk, a parent that is a
    file, an output path that is a directory."""
    try:
        yield
    except OSError as exc:
        existing = _existing_ancestor(Path(path).parent)
        cause = f"{existing} is not a directory" if not existing.is_dir() else exc.strerror or str(exc)
        raise UserError(f"{path}: cannot write {what}: {cause}") from None


def _existing_ancestor(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_writable(path: str | Path, what: str = "outputs", *, is_file: bool = False) -> None:
    """A ``UserError`` naming ``path`` when a directory (``is_file``: a file) could not be
    made or written there: an ancestor is a file or read-only, or a file's path is a
    directory. Creates nothing. For a command that works a long time before it writes: it
    fails first, not last."""
    path = Path(path)
    if is_file and path.is_dir():
        raise UserError(f"{path}: cannot write {what}: is a directory")
    existing = _existing_ancestor(path.parent if is_file else path)
    if not existing.is_dir():
        raise UserError(f"{path}: cannot write {what}: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"{path}: cannot write {what}: {existing} is not writable")


def check_not_an_input(out: str | Path, inputs: Iterable[str | Path | None], what: str = "output") -> None:
    """A ``UserError`` naming ``out`` when writing it would replace one of ``inputs`` (a
    file) or put a file inside one (a directory: a knowledge store, a model whose card pins
    the hash of every file in it). Paths are compared resolved (symlinks, ``..``)."""
    target = Path(out).resolve()
    for given in inputs:
        if given is None or not Path(given).exists():
            continue
        source = Path(given).resolve()
        if target == source or (source.is_dir() and source in target.parents):
            where = "is" if target == source else "is inside"
            raise UserError(f"{out}: cannot write {what}: it {where} the input {given}; choose another path")
