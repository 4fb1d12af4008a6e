"""Paging through the checks on a real server process (the stand-in LLM, real retrieval):
``GET /api/checks?limit=N&before=ID`` walks every check once, newest first, with the total;
the home page shows 200 and links to the older ones (``/?before=ID``); hostile paging
values get a one-line 400, never an unbounded list. The checks' ids cross from six digits
to seven (999996 … 1000200): newest first is by number, not by text."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from sanctuary_local.serve.paging import API_LIMIT, HISTORY_ROWS, MAX_LIMIT
from tests.support.serve_support import Server, build_index, many_checks

N = HISTORY_ROWS + 5


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, repo_dir: Path) -> Iterator[tuple[Server, list[str]]]:
    root = tmp_path_factory.mktemp("paging")
    ids = many_checks(root / "data", N, after=999_995)
    server = Server(build_index(repo_dir / "examples" / "corpus", root / "index"), root / "data")
    try:
        yield server, ids[::-1]
    finally:
        server.close()


def test_the_api_walks_every_check_once_newest_first(site: tuple[Server, list[str]]) -> None:
    server, newest_first = site
    assert newest_first[0] == "1000200" and newest_first[-1] == "999996"
    first = server.request("GET", "/api/checks").json()
    assert [c["id"] for c in first["checks"]] == newest_first[:API_LIMIT]
    assert (first["total"], first["limit"], first["before"]) == (N, API_LIMIT, None)
    seen, url, pages = [], "/api/checks?limit=64", 0
    while url is not None:
        reply = server.request("GET", url)
        assert reply.status == 200, reply.text
        body = reply.json()
        assert body["total"] == N and len(body["checks"]) <= 64
        seen += [c["id"] for c in body["checks"]]
        url, pages = body["next"], pages + 1
    assert seen == newest_first and pages == 4  # 64 + 64 + 64 + 13
    last = server.request("GET", f"/api/checks?before={newest_first[-1]}").json()
    assert last["checks"] == [] and last["next"] is None and last["total"] == N


@pytest.mark.parametrize("query, said", [
    ("limit=1000000000", f"'limit' must be a whole number from 1 to {MAX_LIMIT}"),
    (f"limit={MAX_LIMIT + 1}", f"'limit' must be a whole number from 1 to {MAX_LIMIT}"),
    ("limit=-5", "'limit' must be a whole number"), ("limit=0", "'limit' must be a whole number"),
    ("limit=2.5", "'limit' must be a whole number"), ("limit=ten", "'limit' must be a whole number"),
    ("limit=", "'limit' must be a whole number"), ("limit=" + "9" * 5000, "'limit' must be a whole number"),
    ("limit=5&limit=6", "'limit' is given 2 times"), ("before=-1", "'before' must be a check id"),
    ("before=../000001", "'before' must be a check id"), ("offset=10", "unknown query parameter 'offset'"),
])
def test_hostile_paging_values_are_a_400(site: tuple[Server, list[str]], query: str, said: str) -> None:
    server, _ = site
    reply = server.request("GET", f"/api/checks?{query}")
    assert reply.status == 400 and reply.json()["error"].startswith(said), reply.text
    assert len(reply.body) < 300  # one line, the hostile value cut short


def history(html: str) -> list[str]:
    return re.findall(r'<tr><td>(\d+)</td>', html)


def test_the_home_page_links_to_the_older_checks(site: tuple[Server, list[str]]) -> None:
    server, newest_first = site
    home = server.request("GET", "/").text
    assert history(home) == newest_first[:HISTORY_ROWS]
    assert f"Checks 1–{HISTORY_ROWS} of {N}, newest first." in home
    older = re.search(r'<a id="older" href="([^"]+)">Older checks</a>', home)
    assert older and older.group(1) == f"/?before={newest_first[HISTORY_ROWS - 1]}" and 'id="newest"' not in home
    page2 = server.request("GET", older.group(1)).text
    assert history(page2) == newest_first[HISTORY_ROWS:]
    assert f"Checks {HISTORY_ROWS + 1}–{N} of {N}, newest first." in page2
    assert '<a id="newest" href="/">Newest checks</a>' in page2 and 'id="older"' not in page2


@pytest.mark.parametrize("query", ["before=abc", "before=1&before=2", "before=" + "1" * 13])
def test_a_bad_cursor_on_the_page_is_a_400(site: tuple[Server, list[str]], query: str) -> None:
    server, _ = site
    reply = server.request("GET", f"/?{query}")
    assert reply.status == 400 and '<p id="refused">' in reply.text and "before" in reply.text
