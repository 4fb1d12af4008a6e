"""Which checks a list shows, a page at a time, newest first: the history on the home page
(``/?before=ID``) and ``GET /api/checks?limit=N&before=ID``.

``before`` is a cursor: only checks older than check ``ID`` (whose id is lower), so a page
does not shift when new checks arrive while a client pages through; the next page's cursor
is the last id shown. ``limit`` is how many checks one API page holds: 1 to ``MAX_LIMIT``,
``API_LIMIT`` when absent; the home page shows ``HISTORY_ROWS``. A value that is not one of
these (a negative or huge ``limit``, ``before=abc``, a parameter given twice) is a
``PagingError``, answered 400 with its message, never a traceback or an unbounded list.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sanctuary_local.serve.jobs import CheckRecord, CheckStore

__all__ = ["API_LIMIT", "HISTORY_ROWS", "MAX_LIMIT", "HistoryPage", "PagingError", "history_page", "paging_args"]

#: Checks the history on the home page lists per page.
HISTORY_ROWS = 200
#: Checks one ``GET /api/checks`` answer holds by default, and at most.
API_LIMIT, MAX_LIMIT = 100, 1000
#: What the values look like (before any range check): plain decimal digits, a few of them.
_LIMIT, _BEFORE = re.compile(r"[0-9]{1,4}"), re.compile(r"[0-9]{1,12}")


class PagingError(ValueError):
    """A paging parameter the server will not use (answered 400 with the message)."""


@dataclass(frozen=True)
class HistoryPage:
    """One page of checks, newest first."""

    checks: list[CheckRecord]
    total: int
    """Every check the server keeps."""
    first: int
    """The place of the first check shown among all of them, newest first (1 on the first page)."""
    before: str | None
    """The cursor this page was asked with (None: the newest checks)."""
    older: str | None
    """The cursor of the next page (the last id shown), or None when no older check is left."""


def _shown(raw: str) -> str:
    return repr(raw if len(raw) <= 24 else raw[:24] + "…")


def _one(params: Mapping[str, Sequence[str]], name: str) -> str | None:
    values = params.get(name) or []
    if len(values) > 1:
        raise PagingError(f"'{name}' is given {len(values)} times; give it once")
    return values[0] if values else None


def paging_args(params: Mapping[str, Sequence[str]], *, api: bool) -> tuple[str | None, int]:
    """``(before, limit)`` from a request's query parameters (``name -> [values]``). The API
    takes ``limit`` and ``before`` and refuses any other parameter; the home page takes
    ``before`` (its ``limit`` is ``HISTORY_ROWS``) and ignores the rest."""
    if api and (unknown := sorted(set(params) - {"limit", "before"})):
        raise PagingError(f"unknown query parameter {unknown[0]!r}: GET /api/checks takes 'limit' and 'before'")
    before, limit = _one(params, "before"), HISTORY_ROWS
    if before is not None and not _BEFORE.fullmatch(before):
        raise PagingError(f"'before' must be a check id (its digits, e.g. 000051), got {_shown(before)}")
    if api:
        raw = _one(params, "limit")
        limit = API_LIMIT if raw is None else int(raw) if _LIMIT.fullmatch(raw) else -1
        if not 1 <= limit <= MAX_LIMIT:
            raise PagingError(f"'limit' must be a whole number from 1 to {MAX_LIMIT} (default {API_LIMIT}), "
                              f"got {_shown(raw or '')}")
    return before, limit


def history_page(store: CheckStore, before: str | None, limit: int) -> HistoryPage:
    """The ``limit`` newest checks older than ``before`` (all of them when None), by number:
    ``000999`` comes before ``1000000``."""
    records = list(store.records.values())  # a copy: the worker and the API add and delete meanwhile
    cut = int(before) if before is not None else None
    older = [r for r in records if cut is None or int(r.id) < cut]
    shown = heapq.nlargest(limit + 1, older, key=lambda r: int(r.id))
    more = len(shown) > limit
    shown = shown[:limit]
    return HistoryPage(shown, len(records), len(records) - len(older) + 1, before, shown[-1].id if more else None)
