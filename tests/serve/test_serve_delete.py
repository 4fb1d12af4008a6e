"""Deleting and cancelling a check in `sanctuary-local serve`, on real server processes (the
stand-in LLM of benchmarks/fake_llm.py, real retrieval): from its page (CSRF form, then a
confirmation page) and with ``DELETE /api/checks/ID``; a waiting check leaves the queue, a
running one stops at its next stop point and the next check then runs; the check's folder is
gone from --data, nothing else there or outside it is touched, and a restart does not bring
it back. Plus the store's own guarantees: a delete a crash cut short is finished at start, a
check folder that is a link is never followed. And the page of a waiting check: how often it
reloads itself, and its link to stop that."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import orjson
import pytest

from sanctuary_local.errors import UserError
from sanctuary_local.serve.jobs import CheckStore, delete_check
from tests.support.serve_support import Server, build_index, tree

CLAIM = "Water boils at 70 degrees Celsius on the summit of Mount Everest."
TOKEN = "s3cret-token-for-tests-0123"
FORM = {"content-type": "application/x-www-form-urlencoded"}


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory, repo_dir: Path) -> Path:
    return build_index(repo_dir / "examples" / "corpus", tmp_path_factory.mktemp("ix") / "index")


def post(server: Server, claim: str, **headers: str) -> str:
    reply = server.request("POST", "/api/checks", {"claim": claim}, headers=headers)
    assert reply.status == 202, reply.text
    return reply.json()["id"]


def browser(server: Server, path: str) -> tuple[str, str, str]:
    """A page as a browser gets it: (its HTML, the CSRF cookie it set, the form token)."""
    reply = server.request("GET", path)
    sid = re.search(r"sl_sid=([^;]+)", reply.headers["set-cookie"]).group(1)
    return reply.text, sid, re.search(r'name="csrf" value="([0-9a-f]+)"', reply.text).group(1)


def wait_gone(server: Server, check_id: str, timeout: float = 60, **headers: str) -> None:
    deadline = time.monotonic() + timeout
    while server.request("GET", f"/api/checks/{check_id}", headers=headers).status != 404:
        assert time.monotonic() < deadline, f"check {check_id} was not deleted"
        time.sleep(0.1)


def wait_running(server: Server, check_id: str, timeout: float = 120) -> None:
    """Until the check's first stage (its first model call) runs."""
    deadline = time.monotonic() + timeout
    while not any(s["name"] == "hyde" and s["state"] == "running"
                  for s in server.request("GET", f"/api/checks/{check_id}").json()["stages"]):
        assert time.monotonic() < deadline, "the check never ran"
        time.sleep(0.1)


def listed(server: Server, **headers: str) -> list[str]:
    return [c["id"] for c in server.request("GET", "/api/checks", headers=headers).json()["checks"]]


def test_delete_a_finished_check_from_its_page(index: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = Server(index, data)
    try:
        server.wait_ready()
        kept, gone = post(server, "Another claim that stays."), post(server, CLAIM)
        assert server.wait_done(kept)["status"] == "done" and server.wait_done(gone)["status"] == "done"
        outside, others = tree(index), tree(data / "checks" / kept)
        html, sid, csrf = browser(server, f"/checks/{gone}")
        assert f'action="/checks/{gone}/delete"' in html and "Delete this check" in html
        cookie = {**FORM, "cookie": f"sl_sid={sid}"}
        # no CSRF token, a token of another browser: refused, nothing removed
        assert server.request("POST", f"/checks/{gone}/delete", b"confirm=yes", cookie).status == 403
        forged = {**FORM, "cookie": "sl_sid=" + "b" * 32}
        assert server.request("POST", f"/checks/{gone}/delete", f"confirm=yes&csrf={csrf}".encode(), forged).status == 403
        # the button asks first (no script: a confirmation page with its own form)
        ask = server.request("POST", f"/checks/{gone}/delete", f"csrf={csrf}".encode(), cookie)
        assert ask.status == 200 and 'name="confirm" value="yes"' in ask.text and "Yes, delete check" in ask.text
        assert (data / "checks" / gone / "run" / "predictions.json").is_file()
        done = server.request("POST", f"/checks/{gone}/delete", f"csrf={csrf}&confirm=yes".encode(), cookie)
        assert done.status == 200 and f"Check {gone} deleted" in done.text, done.text
        assert not (data / "checks" / gone).exists()
        assert server.request("GET", f"/checks/{gone}").status == 404
        assert server.request("GET", f"/api/checks/{gone}").status == 404
        assert server.request("GET", f"/checks/{gone}/download").status == 404
        assert listed(server) == [kept]
        assert f"/checks/{gone}" not in server.request("GET", "/").text
        assert server.request("POST", f"/checks/{gone}/delete", f"csrf={csrf}&confirm=yes".encode(), cookie).status == 404
        new = post(server, "A third claim.")
        assert new > gone, "a deleted check's id is never given again"
        server.wait_done(new)
        assert tree(data / "checks" / kept) == others and tree(index) == outside
        assert server.stop(signal.SIGTERM) < 30 and server.proc.returncode == 143  # 128 + SIGTERM
    finally:
        server.close()
    assert sorted(p.name for p in (data / "checks").iterdir()) == [".last-id", kept, new]
    again = Server(index, data, log=tmp_path / "again.log")  # a restart does not bring it back
    try:
        again.wait_ready()
        assert listed(again) == [new, kept]
        assert again.request("GET", f"/checks/{gone}").status == 404
        assert post(again, "A fourth claim.") > new
    finally:
        again.close()


def test_delete_with_the_api_needs_the_token(index: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = Server(index, data, "--token", TOKEN)
    bearer = {"authorization": f"Bearer {TOKEN}"}
    try:
        server.wait_ready(**bearer)
        check_id = post(server, CLAIM, **bearer)
        assert server.wait_done(check_id, **bearer)["status"] == "done"
        assert server.request("DELETE", f"/api/checks/{check_id}").status == 401
        assert server.request("DELETE", f"/api/checks/{check_id}", headers={"authorization": "Bearer wrong-token-0123456789"}).status == 401
        assert (data / "checks" / check_id / "check.json").is_file()
        reply = server.request("DELETE", f"/api/checks/{check_id}", headers=bearer)
        assert reply.status == 200 and reply.json() == {"id": check_id, "status": "deleted"}
        assert not (data / "checks" / check_id).exists()
        assert server.request("GET", f"/api/checks/{check_id}", headers=bearer).status == 404
        assert listed(server, **bearer) == []
        again = server.request("DELETE", f"/api/checks/{check_id}", headers=bearer)
        assert again.status == 404 and again.json() == {"error": "no such check"}
        assert server.request("DELETE", "/api/checks/..%2F..%2Fsecret", headers=bearer).status == 404
        assert (data / "secret").is_file() and (data / "serve.lock").is_file()
    finally:
        server.close()


def test_cancel_a_queued_and_a_running_check_then_the_next_runs(index: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = Server(index, data, latency_s=2.0)
    try:
        server.wait_ready()
        running, queued, last = post(server, CLAIM), post(server, "A claim that waits."), post(server, "The next claim.")
        wait_running(server, running)
        reply = server.request("DELETE", f"/api/checks/{queued}")  # waiting: out of the queue and deleted at once
        assert reply.status == 200 and reply.json()["status"] == "deleted"
        assert not (data / "checks" / queued).exists() and queued not in listed(server)
        html, sid, csrf = browser(server, f"/checks/{running}")
        assert "Cancel and delete this check" in html
        page = server.request("POST", f"/checks/{running}/delete", f"csrf={csrf}&confirm=yes".encode(),
                              {**FORM, "cookie": f"sl_sid={sid}"})
        assert page.status == 200 and "is being cancelled" in page.text, page.text
        view = server.request("GET", f"/api/checks/{running}").json()
        assert view["notes"][-1] == "cancelled: it stops at its next stop point, then it is deleted", view
        assert server.request("DELETE", f"/api/checks/{running}").status == 202  # asked again: still cancelling
        wait_gone(server, running)
        assert not (data / "checks" / running).exists()
        view = server.wait_done(last)
        assert view["status"] == "done" and view["notes"] == [], view
        assert listed(server) == [last]
    finally:
        server.close()
    again = Server(index, data, log=tmp_path / "again.log")
    try:
        again.wait_ready()
        assert listed(again) == [last]
    finally:
        again.close()


def test_a_check_cancelled_as_the_server_stops_is_deleted_at_the_next_start(index: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = Server(index, data, latency_s=30.0)  # the model call outlives the stop's grace
    try:
        server.wait_ready()
        check_id = post(server, CLAIM)
        wait_running(server, check_id)
        assert server.request("DELETE", f"/api/checks/{check_id}").status == 202
        server.stop(signal.SIGTERM)
    finally:
        server.close()
    record = orjson.loads((data / "checks" / check_id / "check.json").read_bytes())
    assert record["cancelled"] is True and record["status"] == "queued", record
    again = Server(index, data, log=tmp_path / "again.log")
    try:
        again.wait_ready()
        assert again.request("GET", f"/api/checks/{check_id}").status == 404 and listed(again) == []
    finally:
        again.close()
    assert sorted(p.name for p in (data / "checks").iterdir()) == [".last-id"]


def test_a_delete_cut_short_is_finished_at_start_and_links_are_not_followed(tmp_path: Path) -> None:
    data, outside = tmp_path / "data", tmp_path / "outside"
    store = CheckStore(data)
    a, b, c = (store.create(f"claim {i}", None) for i in range(3))
    c.cancelled = True  # deleted while it ran, then the server died
    store.save(c)
    (data / "checks" / a.id).rename(data / "checks" / f".deleted-{a.id}-0000")  # crashed after the rename
    outside.mkdir()
    (outside / "keep.txt").write_text("not the server's\n")
    (data / "checks" / b.id / "run").mkdir()
    (data / "checks" / b.id / "run" / "link").symlink_to(outside)
    store.close()
    store = CheckStore(data)
    assert sorted(store.records) == [b.id, c.id] and not (data / "checks" / f".deleted-{a.id}-0000").exists()
    assert store.recover() == [store.records[b.id]]
    assert sorted(store.records) == [b.id] and not (data / "checks" / c.id).exists()
    assert delete_check(store, b.id) and not (data / "checks" / b.id).exists()
    assert (outside / "keep.txt").read_text() == "not the server's\n"  # the link inside was removed, not followed
    d = store.create("claim d", None)
    assert int(d.id) == 4  # ids are never given twice
    folder = data / "checks" / d.id  # swapped for a link out of --data after it was read
    (outside / "check.json").write_bytes(folder.joinpath("check.json").read_bytes())
    for p in folder.iterdir():
        p.unlink()
    folder.rmdir()
    folder.symlink_to(outside)
    with pytest.raises(UserError, match="link or lies outside"):
        delete_check(store, d.id)
    assert sorted(p.name for p in outside.iterdir()) == ["check.json", "keep.txt"] and folder.is_symlink()
    assert not delete_check(store, "../outside") and not delete_check(store, "999999")
    store.close()


def test_a_waiting_checks_page_reloads_less_often_and_can_stop_reloading(index: Path, tmp_path: Path) -> None:
    """A check's page reloaded itself every 2 s for as long as it waited (hundreds of reloads
    far down the queue, each re-read by a screen reader) and could not be told to stop: a
    waiting page now reloads 3 s later per check before it (at most 30 s), the running one
    every 2 s, and ``?refresh=off`` (the page's "Stop reloading" link) turns it off."""
    server = Server(index, tmp_path / "data", latency_s=3.0)
    try:
        server.wait_ready()
        ids = [post(server, f"Claim number {n} about the boiling point of water.") for n in range(4)]
        wait_running(server, ids[0])

        def meta(html: str) -> str | None:
            found = re.search(r'<meta http-equiv="refresh" content="(\d+)">', html)
            return found.group(1) if found else None

        running, last = server.request("GET", f"/checks/{ids[0]}").text, server.request("GET", f"/checks/{ids[3]}").text
        assert meta(running) == "2" and f'href="/checks/{ids[0]}?refresh=off">Stop reloading' in running
        assert meta(last) == "11"  # third in the queue: 2 + 3 x 3
        off = server.request("GET", f"/checks/{ids[3]}?refresh=off").text
        assert meta(off) is None and "Automatic reloading is off" in off and f'href="/checks/{ids[3]}">turn it back on' in off
    finally:
        server.close()
