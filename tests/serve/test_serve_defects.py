"""Five small defects of `sanctuary-local serve` found by the hostile probe of 2026-12-02
(issue 68, items 4 and 6-8; item 5 is in test_serve_reliability.py), on a real server process
on loopback (the stand-in LLM of tests/support/serve_stub.py, 30 s a model call: the checks it is
given stay queued or running while the test looks): a trailing slash is a plain 404 with no
``Location``; check ids sort by number in the queue and in the ETA's newest-finished pick;
an invisible claim is a 422 naming the rule; a foreign ``Origin`` on a state-changing API
call is 403; the ``Host`` header is parsed exactly."""

from __future__ import annotations

import http.client
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sanctuary_local.serve.jobs import CheckStore
from tests.support.serve_support import Server, build_index

#: The history the server starts with: ids crossing from six digits to seven.
DONE_OLD, QUEUED_OLD, DONE_NEW, QUEUED_NEW = "999998", "999999", "1000000", "1000001"


def seed(data: Path) -> None:
    """Two finished checks (the older one ran only stage 1) and two queued ones, ids from 999998."""
    (data / "checks").mkdir(parents=True)
    (data / "checks" / ".last-id").write_text("999997")
    store = CheckStore(data)
    try:
        for check_id, status, seconds in ((DONE_OLD, "done", {"hyde": 1.0}), (QUEUED_OLD, "queued", {}),
                                          (DONE_NEW, "done", {"hyde": 2.0, "retrieval": 1.0, "verdict": 3.0}),
                                          (QUEUED_NEW, "queued", {})):
            rec = store.create(f"Claim {check_id} of the history.", None)
            assert rec.id == check_id
            rec.status, rec.stage_seconds = status, seconds
            if status == "done":
                rec.label = "Supported"
            store.save(rec)
    finally:
        store.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, repo_dir: Path) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("defects")
    index = build_index(repo_dir / "examples" / "corpus", root / "index")
    seed(root / "data")
    server = Server(index, root / "data", latency_s=30.0)
    try:
        server.wait_ready()
        yield server
    finally:
        server.close()


def test_a_trailing_slash_is_a_plain_404(server: Server) -> None:
    for method, path in (("DELETE", f"/api/checks/{DONE_OLD}/"), ("GET", f"/api/checks/{DONE_OLD}/"),
                         ("GET", "/api/checks/"), ("GET", f"/checks/{DONE_OLD}/"), ("POST", "/checks/")):
        reply = server.request(method, path)
        assert reply.status == 404 and "location" not in reply.headers, (method, path, reply.status, reply.headers)
    assert server.request("GET", f"/api/checks/{DONE_OLD}").status == 200  # still there


def test_ids_sort_by_number_in_the_queue_and_the_eta(server: Server) -> None:
    deadline = time.monotonic() + 60
    while (running := server.request("GET", "/api/status").json()["running"]) is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert running == QUEUED_OLD, running  # 999999 was first in line, not '1000001' (text order)
    waiting = server.request("GET", f"/api/checks/{QUEUED_NEW}").json()
    assert waiting["status"] == "queued" and waiting["position"] == 1, waiting
    # the stage order comes from the newest finished check: 1000000 (three stages), not 999998
    assert [s["name"] for s in waiting["stages"]] == ["hyde", "retrieval", "verdict"], waiting["stages"]
    assert waiting["eta_s"] is not None


@pytest.mark.parametrize("claim", ["\u3164", "\u3164 \u3164\n\u3164", "\u0301\u0301\u0301", "\u115f\u1160\uffa0",
                                   "\ufe0f\u034f", "\U000e0041\U000e0042", "\u3164\u0301 \u200b"],
                         ids=["hangul-filler", "fillers-and-spaces", "combining-marks", "other-fillers",
                              "variation-selector", "tag-characters", "mixed"])
def test_a_claim_with_nothing_visible_is_refused(server: Server, claim: str) -> None:
    before = server.request("GET", "/api/checks").json()["total"]
    reply = server.request("POST", "/api/checks", {"claim": claim})
    assert reply.status == 422, (claim, reply.status)
    error = reply.json()["error"]  # tag characters are format characters (Cf): empty, as before
    assert error == "the claim is empty" if claim[0] == "\U000e0041" else "no visible letter or digit" in error, error
    assert server.request("GET", "/api/checks").json()["total"] == before


def test_a_claim_with_a_visible_letter_beside_marks_is_taken(server: Server) -> None:
    for claim in ("e\u0301t\u00e9 \u3164", "\u3164 1"):
        assert server.request("POST", "/api/checks", {"claim": claim}).status == 202, claim


def test_a_foreign_origin_on_a_state_changing_call_is_403(server: Server) -> None:
    own = f"http://127.0.0.1:{server.port}"
    before = server.request("GET", "/api/checks").json()["total"]
    for headers in ({"origin": "http://evil.example"}, {"origin": "null"}, {"origin": f"http://127.0.0.1:{server.port + 1}"},
                    {"sec-fetch-site": "cross-site"}, {"sec-fetch-site": "same-site"},
                    {"origin": own, "sec-fetch-site": "cross-site"}):
        posted = server.request("POST", "/api/checks", {"claim": "A claim from elsewhere."}, headers)
        assert posted.status == 403 and "another site" in posted.json()["error"], (headers, posted.status)
        deleted = server.request("DELETE", f"/api/checks/{DONE_OLD}", headers=headers)
        assert deleted.status == 403, (headers, deleted.status)
    assert server.request("GET", "/api/checks").json()["total"] == before
    assert server.request("GET", "/api/checks", headers={"origin": "http://evil.example"}).status == 200  # reads: CORS
    for headers in ({}, {"origin": own}, {"origin": own, "sec-fetch-site": "same-origin"}, {"sec-fetch-site": "none"}):
        assert server.request("POST", "/api/checks", {"claim": "A claim from here."}, headers).status == 202, headers


def raw_host(server: Server, host: str) -> int:
    """The status of ``GET /api/status`` sent with this exact ``Host`` header."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        conn.putrequest("GET", "/api/status", skip_host=True)
        conn.putheader("Host", host)
        conn.endheaders()
        return conn.getresponse().status
    finally:
        conn.close()


def test_the_host_header_is_parsed_exactly(server: Server) -> None:
    port = server.port
    for host in (f"127.0.0.1:{port}@evil.example", f"localhost:{port}@evil.example", f"127.0.0.1:{port}/evil",
                 "127.0.0.1:99999", "127.0.0.1:", f"127.0.0.1:{port}:1", "user@127.0.0.1", f"[::1]:{port}x",
                 "evil.example", f"127.0.0.1.evil.example:{port}"):
        assert raw_host(server, host) in (400, 421), host
    for host in (f"127.0.0.1:{port}", "127.0.0.1", f"localhost:{port}", f"LOCALHOST:{port}", f"[::1]:{port}", "127.0.0.2"):
        assert raw_host(server, host) == 200, host
