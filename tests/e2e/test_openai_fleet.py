"""The openai_http backend over a fleet of real servers on 127.0.0.1: requests spread over
every server, each kept busy; a server killed mid-run has its requests retried on the
others, no request lost or run twice; per-server figures in ``server_stats``.

The servers are llama.cpp servers (llama-cpp-python, the cpu and dev extras) over the
packaged Qwen2.5-Coder-0.5B GGUF, one thread each: the fleet logic is the client's and is
the same for ``vllm serve`` (two vLLM servers do not fit on a 2-core CI machine next to
each other; ``benchmarks/speed/fleet.py`` ran one for real, see docs/gpu.md)."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest

from sanctuary_local.config.settings import LLMConfig, SamplingConfig
from sanctuary_local.errors import MissingModel, UserError
from sanctuary_local.llm import local_server, make_backend
from sanctuary_local.llm.base import ChatMessage, ChatRequest
from sanctuary_local.llm.openai_http import server_urls
from sanctuary_local.models.resolve import resolve_model

QWEN = "packaged:qwen2.5-coder-0.5b-instruct-q4-k-m-gguf"


def _start(model: Path, log: Path) -> tuple[subprocess.Popen, str]:
    # The server process itself (killing it must kill the server); it dies with this test.
    port = local_server.free_port()
    return local_server.start(local_server.llama_cpp_cmd(model, port, n_ctx=1024), port, log)


@pytest.fixture()
def fleet(tmp_path):
    """Two fresh servers (function scope: one test kills one)."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install '.[cpu]')")
    pytest.importorskip("uvicorn", reason="llama-cpp-python server deps missing (pip install '.[dev]')")
    try:
        model = resolve_model(QWEN)
    except MissingModel as exc:
        pytest.skip(str(exc))
    servers = [_start(model, tmp_path / f"server{i}.log") for i in range(2)]
    try:
        for i, (proc, url) in enumerate(servers):
            local_server.wait_up(proc, url, tmp_path / f"server{i}.log")
        yield servers
    finally:
        for proc, _ in servers:
            local_server.stop(proc)


def _requests(n: int, max_tokens: int) -> list[ChatRequest]:
    return [ChatRequest((ChatMessage("user", f"Count from {i} to {i + 30}, one number a line."),),
                        SamplingConfig(temperature=0.0, max_tokens=max_tokens), tag=str(i)) for i in range(n)]


def _backend(urls: list[str]):
    return make_backend(LLMConfig(backend="openai_http", base_url=",".join(urls), served_model="qwen",
                                  concurrency=1, timeout_s=120, retries=1))


def test_server_urls():
    assert server_urls("http://a:1/v1/") == ["http://a:1/v1"]
    assert server_urls("http://a:1/v1, http://b:2/v1") == ["http://a:1/v1", "http://b:2/v1"]
    assert server_urls(["http://a:1/v1", "http://b:2/v1"]) == ["http://a:1/v1", "http://b:2/v1"]
    with pytest.raises(UserError, match="twice"):
        server_urls("http://a:1/v1,http://a:1/v1")


def test_fleet_spreads_requests_and_survives_a_killed_server(fleet):
    (_, url_a), (proc_b, url_b) = fleet
    backend = _backend([url_a, url_b])
    results = backend.generate(_requests(6, 8))
    assert len(results) == 6 and all(r.ok for r in results), [r.error for r in results]
    stats = backend.server_stats
    assert stats[url_a]["requests"] >= 1 and stats[url_b]["requests"] >= 1  # both kept busy
    assert {r.extra["server"] for r in results} == {url_a, url_b}

    # Kill B once it has finished a request of the second batch (it is then on its next one).
    backend = _backend([url_a, url_b])
    done: list = []
    runner = threading.Thread(target=lambda: done.append(backend.generate(_requests(8, 32))))
    runner.start()
    deadline = time.monotonic() + 240
    while backend.server_stats[url_b]["requests"] < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    proc_b.kill()
    proc_b.wait(timeout=10)
    runner.join(timeout=300)
    (results,) = done
    stats = backend.server_stats
    assert len(results) == 8 and all(r.ok for r in results), [r.error for r in results]
    assert stats[url_b]["failed"] >= 1  # its request in flight (or its next) failed and moved to A
    assert sum(s["requests"] - s["failed"] for s in stats.values()) == 8  # each request ran to completion once
    assert [r.extra["server"] for r in results].count(url_b) == stats[url_b]["requests"] - stats[url_b]["failed"]


def test_fleet_with_a_dead_server_from_the_start(fleet):
    (_, url_a), _ = fleet
    dead = f"http://127.0.0.1:{local_server.free_port()}/v1"  # nothing listens there
    backend = _backend([dead, url_a])
    results = backend.generate(_requests(3, 4))
    assert all(r.ok and r.extra["server"] == url_a for r in results), [r.error for r in results]
    assert backend.server_stats[dead]["failed"] == 1 and backend.server_stats[dead]["requests"] == 1
