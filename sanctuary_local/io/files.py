"""Reading a whole small input file (claims, predictions, leaderboard CSV) as UTF-8 text,
with every failure turned into a ``UserError`` that names the file (and line)."""

from __future__ import annotations

from pathlib import Path

from sanctuary_local.errors import UserError


def read_utf8(path: str | Path, what: str = "file") -> bytes:
    """The file's bytes, checked to be non-empty valid UTF-8.

    Non-UTF-8 bytes are an error (not replaced): these files are small, hand-made data,
    so silently mangling them would hide the mistake."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{path}: {what} not found") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, expected a {what}") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read {what}: {exc.strerror}") from None
    if not raw.strip():
        raise UserError(f"{path}: {what} is empty")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise UserError(f"{path}:{line}: not UTF-8 (byte offset {exc.start}: {exc.reason})") from None
    return raw
