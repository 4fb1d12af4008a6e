"""`sanctuary-local serve` under stress, on real server processes (the stand-in LLM of
benchmarks/fake_llm.py with a latency per request, real retrieval): kill -9 mid-check then
a restart resumes the check from its saved stages and leaves no process behind; a check
the server keeps dying under is failed with its reason; SIGTERM ends the server promptly
with the check saved as queued, resumed at the next start; 50 claims posted at once are
each accepted and checked exactly once, with no 5xx."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson
import pytest

from sanctuary_local import procs
from sanctuary_local.run.stage_files import STAGE_FILES
from sanctuary_local.serve.jobs import MAX_KILLS, CheckStore
from sanctuary_local.serve.stopping import stop_line
from tests.support.serve_support import ROOT, STUB, TINY, Server, build_index

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
        assert server.proc.returncode == 143, server.log.read_text()[-2000:]  # 128 + SIGTERM, as `run` and `check`
        assert stop_lines(server) == [f"stopped (SIGTERM): check {check_id} was interrupted and saved as queued, "
                                      f"its finished stages kept; it resumes when `sanctuary-local serve` starts "
                                      f"again with --data {data}"]
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
    # the stage the stop interrupted keeps its record (issue 68: a stop right after stage 1 lost
    # it, and the resumed check showed "hyde: waiting, seconds: null")
    assert "hyde" in record["stage_seconds"], record
    assert [(s["name"], s["state"]) for s in view["stages"]] == [("hyde", "done"), ("retrieval", "done"),
                                                                 ("verdict", "done")], view["stages"]
    assert all(s["seconds"] is not None for s in view["stages"]), view["stages"]


def stop_lines(server: Server) -> list[str]:
    """What the server printed once it had stopped: the line(s) beginning ``stopped``."""
    return [line for line in server.log.read_text().splitlines() if line.startswith("stopped")]


def test_ctrl_c_says_what_became_of_each_check_exits_130_and_ends_every_process_it_started(index: Path,
                                                                                           tmp_path: Path) -> None:
    """SIGINT mid-check with another waiting: one line saying both stay queued, exit 130, and
    the process tree the backend started (a child and its own child, neither with a death
    signal, as a server-backed backend's) is gone with the server."""
    data = tmp_path / "data"
    server = Server(index, data, latency_s=30.0, env={"SERVE_STUB_CHILD": "1"})
    kids: dict[int, int] = {}
    try:
        server.wait_ready()
        first = server.request("POST", "/api/checks", {"claim": CLAIM}).json()["id"]
        second = server.request("POST", "/api/checks", {"claim": CLAIM + " Again."}).json()["id"]
        wait_stage(server, first, "hyde")
        kids = procs.descendants(server.proc.pid)
        started = [(Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[-2]) for p in kids]
        assert b"serve-stub-child" in started and b"serve-stub-grandchild" in started, started
        server.stop(signal.SIGINT, timeout=30)
        assert server.proc.returncode == 130, server.log.read_text()[-2000:]
        assert stop_lines(server) == [f"stopped (SIGINT): check {first} was interrupted and saved as queued, its "
                                      "finished stages kept; 1 waiting check stays queued; they resume when "
                                      f"`sanctuary-local serve` starts again with --data {data}"]
        assert_no_process_left(kids)
    finally:
        server.close()
        procs.signal_all(procs.alive(kids), signal.SIGKILL)  # a failed run leaves nothing sleeping
    for check_id in (first, second):
        assert orjson.loads((data / "checks" / check_id / "check.json").read_bytes())["status"] == "queued"


def test_a_stop_with_nothing_to_do_says_so(index: Path, tmp_path: Path) -> None:
    server = Server(index, tmp_path / "data")
    try:
        server.wait_ready()
        server.stop(signal.SIGINT, timeout=30)
    finally:
        server.close()
    assert server.proc.returncode == 130
    assert stop_lines(server) == ["stopped (SIGINT): no check was running or waiting"]


def test_the_stop_line_says_what_became_of_the_check_that_ran(tmp_path: Path) -> None:
    store = CheckStore(tmp_path / "data")
    done, cancelled, queued = (store.create(f"claim {i}", None) for i in range(3))
    done.status, cancelled.cancelled = "done", True
    data = tmp_path / "data"
    try:
        assert stop_line(signal.SIGTERM, store, done.id, [queued.id], data) == (
            f"stopped (SIGTERM): check {done.id} ended (done) before the stop; 1 waiting check stays queued; "
            f"it resumes when `sanctuary-local serve` starts again with --data {data}")
        assert stop_line(signal.SIGINT, store, cancelled.id, [], data) == (
            f"stopped (SIGINT): check {cancelled.id}, cancelled while it ran, is deleted at the next start")
        assert stop_line(signal.SIGINT, store, "000099", [queued.id, done.id], data).startswith(
            "stopped (SIGINT): check 000099, cancelled while it ran, was deleted; 2 waiting checks stay queued; they resume")
    finally:
        store.close()


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


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("step", ["settings", "data"])
def test_a_signal_while_starting_aborts_in_one_line(index: Path, tmp_path: Path, sig: int, step: str) -> None:
    """SIGTERM during the start (settings and model checks, --data half made) killed the
    process by the signal: no line, --data left half made, the children it had started left
    running. Now it is as Ctrl-C: one line ``aborted``, exit 143 (130), --data as it was found,
    no process left."""
    data, held, log = tmp_path / "data", tmp_path / "held", tmp_path / "serve.log"
    env = {**os.environ, "SERVE_STUB_HOLD": step, "SERVE_STUB_HELD": str(held),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, str(STUB), "0", "--corpus", str(index), "--data", str(data), "--profile", TINY, "--port", "0"]
    with open(log, "wb") as err:
        proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=err)
    kids: dict[int, int] = {}
    try:
        deadline = time.monotonic() + 180
        while len(kids) < 2 and time.monotonic() < deadline and proc.poll() is None:  # the child and its child
            kids = procs.descendants(proc.pid) if held.exists() else {}
            time.sleep(0.1)
        assert len(kids) == 2, log.read_text()[-2000:]
        proc.send_signal(sig)
        proc.wait(60)
        output = log.read_text()
        assert proc.returncode == 128 + sig, output[-2000:]
        assert [line for line in output.splitlines() if line.strip()] == ["aborted"], repr(output[-2000:])
        assert not data.exists(), sorted(data.rglob("*"))
        assert_no_process_left(kids)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        procs.signal_all(procs.alive(kids), signal.SIGKILL)
