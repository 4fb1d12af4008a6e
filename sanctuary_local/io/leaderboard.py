"""The official FEVER-8 leaderboard CSV: ``id,claim,evi,label,split``.

``evi`` concatenates, for each question-answer pair, ``question + "\\t\\t\\n" + answer +
"\\t\\t\\n\\n"`` (what the shared task's converter writes). Rows are written with the csv
module's defaults (excel dialect, ``\\r\\n`` row ends, minimal quoting), which makes the
output byte-compatible with the official files.

Reading: a UTF-8 BOM is accepted; fields up to ``CSV_FIELD_LIMIT`` (the csv module's own
default, 128 KiB, is less than a long claim or answer); an unreadable file, a field past
the limit (typically an unbalanced quote that swallows the rest of the file), a quote
never closed before the end of the file, or an id in non-ASCII digits is a ``UserError``
naming ``file:line``.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

from collections.abc import Iterator

from sanctuary_local.errors import UserError
from sanctuary_local.io.claims import check_claim_id
from sanctuary_local.io.files import read_utf8
# Re-exported: callers import the atomic writer from here (it moved to safe_io, issue 27).
from sanctuary_local.io.safe_io import atomic_write_bytes  # noqa: F401

HEADER = ("id", "claim", "evi", "label", "split")
QA_SEP = "\t\t\n"
PAIR_END = "\t\t\n\n"
#: Pairs the official scorer reads per claim (``max_questions`` in averitec_evaluate.py).
OFFICIAL_MAX_PAIRS = 10
#: Largest CSV field read (characters). The whole file is in memory already, so this only
#: tells a garbled file (an unbalanced quote) from a real one: a row of ten long pairs is
#: well under a megabyte; the csv module's default 128 KiB is not enough for a long claim.
CSV_FIELD_LIMIT = 64 * 1024 * 1024


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


def scorer_pairs(evi: str) -> list[tuple[str, str]] | None:
    """The pairs the FEVER-8 scorer reads from an ``evi`` cell (it splits on ``PAIR_END``,
    then each non-empty piece on ``QA_SEP`` into exactly two); ``None`` where it would fail."""
    pairs: list[tuple[str, str]] = []
    for piece in evi.split(PAIR_END):
        if piece:
            parts = piece.split(QA_SEP)
            if len(parts) != 2:
                return None
            pairs.append((parts[0], parts[1]))
    return pairs


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


def _check_quotes_closed(path: Path, text: str) -> None:
    """A ``UserError`` naming the line of the record whose quoted field runs to the end of
    the file: the lenient reader takes the rest of the file as that field, so the rows
    after it, or the last row's ``split`` (``"gold\r\n"``), vanish without a word. Other
    complaints of the strict reader are left to the lenient one (it reads ``"a"b``)."""
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    start = 1
    try:
        for _ in reader:
            start = reader.line_num + 1
    except csv.Error as exc:
        if "unexpected end of data" in str(exc):
            raise UserError(f"{path}:{start}: unreadable CSV: a quote opened in this record is never closed") from None


def _csv_rows(path: Path, text: str) -> Iterator[tuple[int, list[str]]]:
    """``(first line, fields)`` of each CSV record; a csv module error (a field past
    ``CSV_FIELD_LIMIT``, a quote never closed…) is a ``UserError`` naming the line its
    record starts on."""
    csv.field_size_limit(CSV_FIELD_LIMIT)  # process-wide; idempotent
    _check_quotes_closed(path, text)
    reader = csv.reader(io.StringIO(text, newline=""))
    while True:
        start = reader.line_num + 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            hint = " (an unbalanced quote?)" if "field limit" in str(exc) else ""
            msg = str(exc).replace("field larger than field limit", f"a field is larger than {CSV_FIELD_LIMIT} characters")
            raise UserError(f"{path}:{start}: unreadable CSV: {msg}{hint}") from None
        yield start, row


def read_leaderboard_csv(path: str | Path) -> list[LeaderboardRow]:
    """Read a leaderboard/solution CSV; a bad header or row is a UserError naming file:line."""
    path = Path(path)
    rows_in = _csv_rows(path, read_utf8(path, "leaderboard CSV").decode("utf-8"))
    _, header = next(rows_in)
    if tuple(h.strip() for h in header) != HEADER:
        raise UserError(f"{path}:1: expected header {','.join(HEADER)}, got {','.join(header)}")
    rows: list[LeaderboardRow] = []
    for number, (line, row) in enumerate(rows_in, start=1):
        if len(row) != len(HEADER):
            raise UserError(f"{path}:{line}: expected {len(HEADER)} fields, got {len(row)}")
        check_claim_id(row[0], f"{path}:{line}: row {number}", "id")
        rows.append(LeaderboardRow(*row))
    return rows


def check_official_rows(path: str | Path, max_pairs: int | None = None) -> list[str]:
    """Problems the FEVER-8 scorer (averitec_evaluate.py) would hit on this CSV, one
    line each naming the data row and its id; ``[]`` when every row is usable.

    The scorer reads the file with ``pandas.read_csv``, then per row splits ``evi`` on
    ``PAIR_END`` and every non-empty piece with ``q, a = piece.split(QA_SEP)``: an
    empty cell (NaN, a float: no ``.split``) or a piece without exactly one ``QA_SEP``
    raises and stops the whole evaluation. It keeps the first ``OFFICIAL_MAX_PAIRS``
    pairs; ``max_pairs`` also reports rows holding more (our ``run`` emits ≤ 10). Read
    with the csv module, and with pandas as well when it is installed."""
    path = Path(path)
    text = read_utf8(path, "leaderboard CSV").decode("utf-8")
    try:
        records = list(_csv_rows(path, text))
    except UserError as exc:  # not CSV the scorer could read either
        return [str(exc)]
    header = records[0][1] if records else []
    if tuple(header) != HEADER:
        return [f"{path}: header is {','.join(header)!r}, expected {','.join(HEADER)!r}"]
    problems: list[str] = []
    seen: set[str] = set()
    n_rows = 0
    for n_rows, (_, row) in enumerate(records[1:], start=1):
        if len(row) != len(HEADER):
            problems.append(f"row {n_rows}: {len(row)} fields, expected {len(HEADER)}")
            continue
        where = f"row {n_rows} (id {row[0]!r})"
        if not (row[0].isascii() and row[0].isdigit()):
            problems.append(f"{where}: id is not a non-negative integer")
        elif row[0] in seen:
            problems.append(f"{where}: duplicate id")
        seen.add(row[0])
        problems += [f"{where}: {p}" for p in _evi_problems(row[2], max_pairs)]
    return problems + _pandas_problems(path, text, n_rows)


def scorer_evi_problems(evi: str) -> list[str]:
    """Why the FEVER-8 scorer would stop on this ``evi`` cell; ``[]`` when it reads it."""
    return _evi_problems(evi, None)


def _evi_problems(evi: str, max_pairs: int | None) -> list[str]:
    """The scorer's own splitting of one ``evi`` cell, as problems."""
    if not evi.strip():
        return ["evi is empty (pandas reads NaN; the scorer's .split fails)"]
    pieces = [piece for piece in evi.split(PAIR_END) if piece]
    problems = [
        f"evidence piece {k}: {piece.count(QA_SEP)} question-answer separators, expected exactly 1"
        for k, piece in enumerate(pieces) if len(piece.split(QA_SEP)) != 2
    ]
    if not pieces:
        problems.append("evi holds no question-answer pair")
    if max_pairs is not None and len(pieces) > max_pairs:
        problems.append(f"{len(pieces)} question-answer pairs, more than {max_pairs}")
    return problems


def _pandas_problems(path: Path, text: str, n_rows: int) -> list[str]:
    """What ``pandas.read_csv`` (the scorer's reader) sees differently: NaN cells, row count."""
    try:
        import pandas as pd
    except ImportError:
        return []
    try:  # the text already read: the path is not opened twice
        frame = pd.read_csv(io.StringIO(text, newline=""))
        evis = frame["evi"].tolist()
    except (ValueError, KeyError) as exc:  # pandas.errors.ParserError, EmptyDataError …: the scorer stops too
        return [f"{path}: pandas (the scorer's reader) cannot read it: {' '.join(str(exc).split())}"]
    problems = [] if len(frame) == n_rows else [f"pandas reads {len(frame)} rows, the csv module {n_rows}"]
    for i, evi in enumerate(evis, start=1):
        if not isinstance(evi, str):
            problems.append(f"row {i} (id {frame['id'].iloc[i - 1]!r}): pandas reads evi as {evi!r}, not a string")
    return problems


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
