"""`sanctuary-local serve` under stress, on real server processes (the stand-in LLM of
benchmarks/fake_llm.py with a latency per request, real retrieval): kill -9 mid-check then
a restart resumes the check from its saved stages and leaves no process behind; a check
the server keeps dying under is failed with its reason; SIGTERM ends the server promptly
with the check saved as queued, resumed at the next start; 50 claims posted at once are
each accepted and checked exactly once, with no 5xx."""

from __future__ import annotations

import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson
import pytest

from sanctuary_local import procs
from sanctuary_local.run.stage_files import STAGE_FILES
from sanctuary_local.serve.jobs import MAX_KILLS, CheckStore
from serve_support import Server, build_index

CLAIM = "The Eiffel Tower grows by up to 15 centimetres in summer because its iron expands in the heat."


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory, repo_dir: Path) -> Path:
    return build_index(repo_dir / "examples" / "corpus", tmp_path_factory.mktemp("ix") / "index")


def wait_stage(server: Server, check_id: str, stage: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        view = server.request("GET", f"/api/checks/{check_id}").json()
        if any(s["name"] == stage and s["state"] == "running" for s in view["stages"]):
            return
        time.sleep(0.1)
    raise AssertionError(f"stage {stage} never ran: {view}")


def assert_no_process_left(before: dict[int, int], timeout: float = 15) -> None:
    """Every process the server had started is gone (the orphan guard ends them)."""
    deadline = time.monotonic() + timeout
    while procs.alive(before) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not procs.alive(before), f"left behind: {procs.alive(before)}"


def stage_lines(run_dir: Path) -> dict[str, int]:
    return {s: len((run_dir / STAGE_FILES[s]).read_bytes().splitlines()) for s in ("hyde", "retrieval", "verdict")}


def test_kill_9_mid_check_then_restart_resumes_it(index: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = Server(index, data, latency_s=4.0)
    try:
        server.wait_ready()
        check_id = server.request("POST", "/api/checks", {"claim": CLAIM}).json()["id"]
        wait_stage(server, check_id, "verdict")  # stages 1 and 2 are saved
        kids = procs.descendants(server.proc.pid)
        server.stop(signal.SIGKILL)
        assert_no_process_left(kids)
    finally:
        server.close()
    again = Server(index, data, latency_s=0.0, log=tmp_path / "again.log")
    try:
        again.wait_ready()
        view = again.wait_done(check_id)
    finally:
        again.close()
    assert view["status"] == "done", view
    assert view["notes"] == ["the server stopped during stage verdict: resumed from its saved stages"]
    run_dir = data / "checks" / check_id / "run"
    assert stage_lines(run_dir) == {"hyde": 1, "retrieval": 1, "verdict": 1}  # stages 1-2 were not redone
    assert len(orjson.loads((run_dir / "predictions.json").read_bytes())) == 1
    assert len(orjson.loads((run_dir / "manifest.json").read_bytes())["attempts"]) == 2


def test_a_check_the_server_keeps_dying_under_is_failed(index: Path, tmp_path: Path) -> None:
    store = CheckStore(tmp_path / "data")  # as a server left it: killed during stage 1, for the last allowed time
    rec = store.create("A claim that kills the server", None)
    rec.status, rec.stage, rec.kills, rec.attempts = "running", "hyde", MAX_KILLS - 1, MAX_KILLS - 1
    store.save(rec)
    store.close()
    server = Server(index, tmp_path / "data")
    try:
        server.wait_ready()
        view = server.request("GET", f"/api/checks/{rec.id}").json()
    finally:
        server.close()
    assert view["status"] == "failed"
    assert view["error"].startswith(f"the server stopped {MAX_KILLS} times while this check ran (last during stage hyde")


@pytest.mark.parametrize("latency_s", [2.0, 30.0], ids=["stops-at-a-stop-point", "stops-mid-generation"])
def test_sigterm_ends_the_server_and_the_check_resumes(index: Path, tmp_path: Path, latency_s: float) -> None:
    data = tmp_path / "data"
    server = Server(index, data, latency_s=latency_s)
    try:
        server.wait_ready()
        check_id = server.request("POST", "/api/checks", {"claim": CLAIM}).json()["id"]
        wait_stage(server, check_id, "hyde")
        kids = procs.descendants(server.proc.pid)
        took = server.stop(signal.SIGTERM, timeout=30)  # the bound is 5 s (reported, not asserted: loaded CI)
        print(f"SIGTERM to exit: {took:.2f} s (model call {latency_s} s)")
        assert server.proc.returncode == 0, server.log.read_text()[-2000:]
        assert_no_process_left(kids)
    finally:
        server.close()
    record = orjson.loads((data / "checks" / check_id / "check.json").read_bytes())
    assert record["status"] == "queued", record
    assert record["notes"] == ["the server stopped during stage hyde: resumes when it starts again"]
    again = Server(index, data, log=tmp_path / "again.log")
    try:
        again.wait_ready()
        view = again.wait_done(check_id)
    finally:
        again.close()
    assert view["status"] == "done" and view["notes"] == record["notes"], view
    assert stage_lines(data / "checks" / check_id / "run") == {"hyde": 1, "retrieval": 1, "verdict": 1}


def test_fifty_claims_at_once_are_each_checked_once(index: Path, tmp_path: Path, repo_dir: Path) -> None:
    claims = [c["claim"] for c in orjson.loads((repo_dir / "examples" / "claims.json").read_bytes())]
    posted = [f"{claims[i % len(claims)]} (variant {i})" for i in range(50)]
    server = Server(index, tmp_path / "data")
    try:
        server.wait_ready()
        with ThreadPoolExecutor(50) as pool:
            replies = list(pool.map(lambda c: server.request("POST", "/api/checks", {"claim": c}), posted))
        assert [r.status for r in replies] == [202] * 50, [r.text for r in replies if r.status != 202]
        ids = [r.json()["id"] for r in replies]
        assert len(set(ids)) == 50
        views = [server.wait_done(i, timeout=900) for i in ids]
        listed = server.request("GET", "/api/checks")
    finally:
        server.close()
    assert [v["status"] for v in views] == ["done"] * 50
    assert sorted(v["claim"] for v in views) == sorted(posted)  # each answered with its own claim
    assert listed.status == 200 and sorted(c["id"] for c in listed.json()["checks"]) == sorted(ids)
    for i in ids:
        run_dir = tmp_path / "data" / "checks" / i / "run"
        assert stage_lines(run_dir) == {"hyde": 1, "retrieval": 1, "verdict": 1}
        assert len(orjson.loads((run_dir / "predictions.json").read_bytes())) == 1
