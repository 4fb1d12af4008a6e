"""The official FEVER-8 leaderboard CSV: ``id,claim,evi,label,split``.

``evi`` concatenates, for each question-answer pair, ``question + "\\t\\t\\n" + answer +
"\\t\\t\\n\\n"`` (what the shared task's converter writes). Rows are written with the csv
module's defaults (excel dialect, ``\\r\\n`` row ends, minimal quoting), which makes the
output byte-compatible with the official files.
"""

from __future__ import annotations

import csv
import io
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sanctuary_local.errors import UserError
from sanctuary_local.io.files import read_utf8

HEADER = ("id", "claim", "evi", "label", "split")
QA_SEP = "\t\t\n"
PAIR_END = "\t\t\n\n"


@dataclass(frozen=True, slots=True)
class LeaderboardRow:
    """One row of the leaderboard CSV."""

    id: str
    claim: str
    evi: str
    label: str
    split: str

    @property
    def qa_pairs(self) -> list[tuple[str, str]]:
        return parse_evi(self.evi)


def format_evi(pairs: list[tuple[str, str]]) -> str:
    """Question-answer pairs → the ``evi`` cell."""
    return "".join(f"{q}{QA_SEP}{a}{PAIR_END}" for q, a in pairs)


def parse_evi(evi: str) -> list[tuple[str, str]]:
    """The ``evi`` cell → question-answer pairs (inverse of ``format_evi``).

    Texts that themselves contain the separators cannot be told apart; the official
    converter has the same ambiguity, so round trips are exact for real data."""
    pairs: list[tuple[str, str]] = []
    for block in evi.split(PAIR_END):
        if not block:
            continue
        q, sep, a = block.partition(QA_SEP)
        pairs.append((q, a) if sep else (q, ""))
    return pairs


def read_leaderboard_csv(path: str | Path) -> list[LeaderboardRow]:
    """Read a leaderboard/solution CSV; a bad header or row is a UserError naming file:line."""
    path = Path(path)
    text = read_utf8(path, "leaderboard CSV").decode("utf-8")
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader)
    if tuple(h.strip() for h in header) != HEADER:
        raise UserError(f"{path}:1: expected header {','.join(HEADER)}, got {','.join(header)}")
    rows: list[LeaderboardRow] = []
    for row in reader:
        if len(row) != len(HEADER):
            raise UserError(f"{path}:{reader.line_num}: expected {len(HEADER)} fields, got {len(row)}")
        rows.append(LeaderboardRow(*row))
    return rows


def leaderboard_csv_text(rows: list[LeaderboardRow]) -> str:
    out = io.StringIO(newline="")
    writer = csv.writer(out)
    writer.writerow(HEADER)
    for r in rows:
        writer.writerow((r.id, r.claim, r.evi, r.label, r.split))
    return out.getvalue()


def write_leaderboard_csv(rows: list[LeaderboardRow], path: str | Path) -> Path:
    """Write atomically (temp file + rename): no partial file is ever left behind."""
    return atomic_write_bytes(Path(path), leaderboard_csv_text(rows).encode("utf-8"))


def atomic_write_bytes(path: Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` via a temp file in the same directory, fsync, rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
