"""`sanctuary-local serve` while its corpus is re-indexed (docs/serve.md: "Re-indexing while
the server runs is fine"), on a real server process (the stand-in LLM, real retrieval).

A new file that sorts first shifts every unit number of the index. A check made before
must still name the file its evidence came from (its prediction's URL), not whatever file
now holds its old unit number; and a file the new generation lists can be opened."""

from __future__ import annotations

import html
import re
import shutil
from pathlib import Path

from tests.support.serve_support import KEEP_SNIPPETS, ROOT, Server, build_index

CLAIM = "Water boils at 70 degrees Celsius on the summit of Mount Everest."


def _sources(page: str) -> list[str]:
    """The file each evidence snippet of a check page is attributed to, in order."""
    srcs = re.findall(r'<div class="src">(.*?)</div>', page, re.S)
    return [html.unescape(re.sub(r"<[^>]+>", "", s).split("·")[0].split(",")[0].strip()) for s in srcs]


def test_reindexing_keeps_each_snippet_with_its_own_file(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    shutil.copytree(ROOT / "examples" / "corpus", corpus)
    index = build_index(corpus, tmp_path / "index")
    server = Server(index, tmp_path / "data", *KEEP_SNIPPETS, "--set", "verdict.mode=trained")
    try:
        server.wait_ready()
        view = server.wait_done(server.request("POST", "/api/checks", {"claim": CLAIM}).json()["id"])
        assert view["status"] == "done", view
        files = [e["url"].split("#")[0] for e in view["result"]["evidence"]]
        before = server.request("GET", f"/checks/{view['id']}").text
        assert _sources(before) == files, _sources(before)

        (corpus / "aaa-first.txt").write_text("Everest climbers say water boils at about 70 degrees Celsius there.\n")
        build_index(corpus, index)  # a new generation: every unit after aaa-first.txt moves by one

        after = server.request("GET", f"/checks/{view['id']}").text
        assert _sources(after) == files, f"evidence attributed to other files after re-indexing: {_sources(after)}"
        assert "does not hold the snippet" not in after  # each snippet found again in its own file
        source = server.request("GET", f"/checks/{view['id']}/evidence/1").text
        assert re.sub(r"<[^>]+>", "", re.search(r"<h1>(.*?)</h1>", source).group(1)).split(",")[0] == html.escape(files[0])
        assert '<mark id="span">' in source
        assert server.request("GET", "/files/aaa-first.txt").status == 200  # listed by the live generation

        gone = files[-1]
        (corpus / gone).unlink()
        build_index(corpus, index)  # its snippet is nowhere now: said so, attributed to no other file
        after = server.request("GET", f"/checks/{view['id']}").text
        kept = [f for f in files if f != gone]
        assert [f for f in _sources(after) if f] == kept and "no longer holds this snippet" in after, _sources(after)
    finally:
        server.close()


def test_a_long_history_lists_in_linear_time(tmp_path: Path) -> None:
    """A newsroom's server accumulates checks. ``GET /api/checks`` (and the home page) ran in
    the event loop with a cost quadratic in the history: each listed check recomputed the
    stage order from every check (20,000 checks: tens of seconds, the whole server frozen).
    Listing 20,000 checks, 30 of them waiting, page by page, takes a few seconds at most."""
    import time

    import orjson

    index = build_index(ROOT / "examples" / "corpus", tmp_path / "index")
    checks = tmp_path / "data" / "checks"
    n = 20_000
    for i in range(1, n + 1):
        (checks / f"{i:06d}").mkdir(parents=True)
        (checks / f"{i:06d}" / "check.json").write_bytes(orjson.dumps(
            {"id": f"{i:06d}", "claim": f"claim {i}", "status": "done", "created": 1.0e9 + i, "label": "Refuted",
             "stage_seconds": {"hyde": 20.0, "retrieval": 1.0, "verdict": 0.1}}))
    server = Server(index, tmp_path / "data", latency_s=600)  # the first new check runs on, the rest wait
    try:
        server.wait_ready()
        for k in range(30):
            assert server.request("POST", "/api/checks", {"claim": f"new claim {k}"}).status == 202
        t = time.monotonic()
        listed, url = [], "/api/checks?limit=1000"  # every page (the API gives at most 1,000 checks at once)
        while url:
            page = server.request("GET", url).json()
            listed, url = listed + page["checks"], page["next"]
            assert page["total"] == n + 30
        took = time.monotonic() - t
        waiting = [c for c in listed if c["status"] == "queued"]
        assert len(listed) == len({c["id"] for c in listed}) == n + 30
        assert len(waiting) == 29 and all(c["eta_s"] and c["position"] for c in waiting)
        home = server.request("GET", "/")
        assert home.status == 200 and "done in about" in home.text
        print(f"GET /api/checks, every page: {took:.2f} s for {n} checks")
        assert took < 8, f"GET /api/checks took {took:.1f} s for {n} checks"
    finally:
        server.close()
