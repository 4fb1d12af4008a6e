"""OpenAI-compatible HTTP backend: ``vllm serve``, llama.cpp's server, SGLang, ...

Stdlib only (``urllib`` + a thread pool): ``LLMConfig.concurrency`` requests are in
flight at once; each has a timeout and is retried with exponential backoff on
connection errors, 429 and 5xx. Structured output is sent as the OpenAI
``response_format = {"type": "json_schema", ...}`` (vLLM, llama.cpp server, SGLang); a
server that rejects it (400/422, or llama-cpp-python's 500 — it only knows
``{"type": "json_object", "schema": ...}``) is retried once in that dialect, which is
then remembered. ``top_k``/``min_p`` are sent as the extra body fields these servers read;
a repetition penalty other than 1.0 as both ``repetition_penalty`` (vLLM) and
``repeat_penalty`` (llama.cpp's server).

Fleet: ``base_url`` may name several servers (a list, or URLs separated by commas), e.g.
one ``vllm serve`` per GPU. Each server gets ``concurrency`` worker threads that pull the
next request from one shared queue, so a fast server takes more work and every server
stays busy. A server that stops answering (no connection, or 502/503/504 after the
retries) is dropped for the rest of the call and the request it held goes back to the
front of the queue for the others: every request gets exactly one result, and only when
the last server is gone do the remaining requests fail. ``server_stats`` accumulates
requests, tokens and busy seconds per server (what ``bench`` reports).
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sanctuary_local.config.settings import LLMConfig
from sanctuary_local.errors import UserError
from sanctuary_local.llm.base import ChatMessage, ChatRequest, ChatResult

log = logging.getLogger(__name__)
_RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}
_DOWN_STATUS = {0, 502, 503, 504}  # after the retries: the server is gone, hand its work to the others


def server_urls(base_url: str | list[str] | None) -> list[str]:
    """The servers named by ``llm.base_url``: one URL, a list, or URLs separated by commas."""
    items = base_url if isinstance(base_url, list) else str(base_url or "").split(",")
    urls = [u.strip().rstrip("/") for u in items if u and u.strip()]
    if len(set(urls)) != len(urls):
        raise UserError(f"llm.base_url names a server twice: {urls}")
    return urls


class HTTPFailure(Exception):
    """A non-2xx answer; ``status`` 0 means no answer (connection error, timeout)."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:300]}" if status else body[:300])
        self.status = status


def _messages(messages: tuple[ChatMessage, ...]) -> list[dict[str, str]]:
    return [{"role": m.role, "content": m.content} for m in messages]


def post_json(url: str, payload: dict[str, Any], timeout: float, api_key: str | None = None) -> dict[str, Any]:
    """POST ``payload`` as JSON, the answer parsed; ``HTTPFailure`` for a non-2xx answer or none."""
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    req = urllib.request.Request(url, data=json.dumps(payload).encode("utf-8"), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read().decode("utf-8"))
    except urllib.error.HTTPError as exc:
        raise HTTPFailure(exc.code, exc.read().decode("utf-8", errors="replace")) from None
    except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
        raise HTTPFailure(0, f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}") from None


def post_retrying(cfg: LLMConfig, url: str, payload: dict[str, Any]) -> dict[str, Any]:
    """``post_json`` with ``cfg.timeout_s``, retried ``cfg.retries`` times on no answer and the
    ``_RETRY_STATUS`` codes; the last ``HTTPFailure`` is raised."""
    for attempt in range(cfg.retries + 1):
        try:
            return post_json(url, payload, cfg.timeout_s, cfg.api_key)
        except HTTPFailure as exc:
            if attempt == cfg.retries or (exc.status and exc.status not in _RETRY_STATUS):
                raise
            # Exponential backoff with jitter so parallel workers do not retry in lockstep.
            delay = min(30.0, 0.5 * 2**attempt) * (0.5 + random.random() / 2)
            log.info("openai_http retry %d after %s (sleep %.1fs)", attempt + 1, exc, delay)
            time.sleep(delay)
    raise AssertionError("unreachable")


def response_format(schema: dict[str, Any], dialect: str) -> dict[str, Any]:
    """The ``response_format`` of ``schema`` in the server's dialect (``json_schema`` or ``json_object``)."""
    if dialect == "json_object":
        return {"type": "json_object", "schema": schema}
    return {"type": "json_schema", "json_schema": {"name": "output", "schema": schema, "strict": True}}


def chat_payload(req: ChatRequest, model_id: str, dialect: str) -> dict[str, Any]:
    """The ``/chat/completions`` body of ``req``; optional sampling fields only when set."""
    s = req.sampling
    payload: dict[str, Any] = {
        "model": model_id,
        "messages": _messages(req.messages),
        "temperature": s.temperature,
        "top_p": s.top_p,
        "max_tokens": s.max_tokens,
        "seed": s.seed,
        "n": 1,
        "stream": False,
    }
    penalty = s.repetition_penalty if s.repetition_penalty != 1.0 else None  # vLLM's name, then llama.cpp's
    extras = {"top_k": s.top_k if s.top_k > 0 else None, "min_p": s.min_p if s.min_p > 0 else None, "stop": list(s.stop),
              "repetition_penalty": penalty, "repeat_penalty": penalty}
    payload.update({k: v for k, v in extras.items() if v})  # sent only when set
    if req.json_schema is not None:
        payload["response_format"] = response_format(req.json_schema, dialect)
    return payload


def chat_result(data: dict[str, Any], t0: float, extra: dict[str, Any]) -> ChatResult:
    """A server's answer as a ``ChatResult`` (``KeyError``/``IndexError``/``TypeError``/``ValueError``
    when it is not the OpenAI shape); ``t0`` is when the request began."""
    choice, usage = data["choices"][0], data.get("usage") or {}
    return ChatResult(
        text=(choice.get("message") or {}).get("content") or "",
        prompt_tokens=int(usage.get("prompt_tokens") or 0),
        completion_tokens=int(usage.get("completion_tokens") or 0),
        finish_reason=choice.get("finish_reason") or "",
        seconds=time.perf_counter() - t0,
        extra=extra,
        # OpenAI's usage field; llama.cpp's and vLLM's servers fill it when prefix caching hits
        cached_tokens=int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0),
    )


def error_result(exc: Exception, t0: float, server: str) -> ChatResult:
    """The error result of a request that got no usable answer (``status`` None: a malformed one)."""
    status = exc.status if isinstance(exc, HTTPFailure) else None
    return ChatResult("", finish_reason="error", seconds=time.perf_counter() - t0,
                      error=str(exc) or type(exc).__name__, extra={"server": server, "status": status})


def count_answer(st: dict[str, float], res: ChatResult) -> None:
    """Add one answer to a server's ``server_stats`` entry."""
    st["requests"] += 1
    st["failed"] += 0 if res.ok else 1
    st["completion_tokens"] += res.completion_tokens
    st["busy_s"] += res.seconds


def run_on_fleet(servers: list[str], requests: list[ChatRequest], concurrency: int,
                 one: Callable[[ChatRequest, str], ChatResult],
                 count: Callable[[str, ChatResult], None]) -> list[ChatResult]:
    """``one(request, server)`` for every request, ``concurrency`` worker threads per server
    pulling from one shared queue; a server that stops answering is dropped and its request
    goes back to the front of the queue (see the module docstring); ``count(server, result)``
    is called under the queue's lock for each answer. Results in input order."""
    results: list[ChatResult | None] = [None] * len(requests)
    queue, alive, busy = deque(range(len(requests))), set(servers), [0]
    cond = threading.Condition()

    def worker(server: str) -> None:
        while True:
            with cond:
                # An idle worker waits while others run: a failed server's request may come back.
                while not queue and busy[0] and server in alive:
                    cond.wait()
                if not queue or server not in alive:
                    return
                i = queue.popleft()
                busy[0] += 1
            res = one(requests[i], server)
            with cond:
                busy[0] -= 1
                count(server, res)
                down = not res.ok and res.extra.get("status") in _DOWN_STATUS
                if down and server in alive and len(alive) > 1:  # the last server is never dropped
                    alive.discard(server)
                    log.warning("openai_http: server %s stopped answering (%s); its requests go to the other %d",
                                server, res.error, len(alive))
                if down and server not in alive:
                    queue.appendleft(i)  # no result recorded for it yet: a live server runs it
                else:
                    results[i] = res
                cond.notify_all()

    per_server = min(concurrency, len(requests))
    threads = [threading.Thread(target=worker, args=(s,), daemon=True) for s in servers for _ in range(per_server)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lost = "no server left to run it (all of %s stopped answering)" % ", ".join(servers)
    return [r if r is not None else ChatResult("", finish_reason="error", error=lost) for r in results]


def estimate_tokens(messages: tuple[ChatMessage, ...]) -> int:
    """A conservative token count: 1 token per 3 characters plus 8 per turn."""
    return sum(len(m.content) for m in messages) // 3 + 8 * len(messages)


def count_by_route(route: str, root: str, model_id: str, messages: tuple[ChatMessage, ...],
                   api_key: str | None) -> int:
    """The prompt's token count by one route: ``vllm`` (``/tokenize`` with the chat template),
    ``llama_cpp_python`` (``/extras/tokenize/count`` on the concatenated text plus a per-turn
    allowance) or ``estimate``; ``root`` is the server's URL without ``/v1``."""
    if route == "vllm":
        body = {"model": model_id, "messages": _messages(messages)}
        return int(post_json(f"{root}/tokenize", body, 30, api_key)["count"])
    if route == "llama_cpp_python":
        text = "\n".join(m.content for m in messages)
        return int(post_json(f"{root}/extras/tokenize/count", {"input": text}, 30, api_key)["count"]) + 8 * len(messages)
    return estimate_tokens(messages)


class OpenAIHTTPBackend:
    """``LLMBackend`` for any server exposing ``POST {base_url}/chat/completions``."""

    name = "openai_http"

    def __init__(self, cfg: LLMConfig, models_dir: str | Path = "models") -> None:
        urls = server_urls(cfg.base_url)
        if not urls:
            raise UserError("llm.base_url must be set for the openai_http backend (e.g. 'http://127.0.0.1:8000/v1', "
                            "or several: 'http://10.0.0.1:8000/v1,http://10.0.0.2:8000/v1')")
        if cfg.concurrency < 1 or cfg.timeout_s <= 0 or cfg.retries < 0:
            raise UserError("openai_http: llm.concurrency must be >= 1, llm.timeout_s > 0 and llm.retries >= 0")
        self.cfg = cfg
        self.servers = urls
        self.base_url = urls[0]  # token counts go to the first server
        self.server_stats: dict[str, dict[str, float]] = {
            u: {"requests": 0, "failed": 0, "completion_tokens": 0, "busy_s": 0.0} for u in urls}
        self.model_id = cfg.served_model or cfg.model
        self._schema_dialect = "json_schema"  # switched to "json_object" if the server needs it
        self._lock = threading.Lock()
        self._count_route: str | None = None  # "vllm" | "llama_cpp_python" | "estimate"

    # ------------------------------------------------------------------ generation
    def _one(self, req: ChatRequest, base_url: str | None = None) -> ChatResult:
        t0 = time.perf_counter()
        server = base_url or self.base_url
        url = f"{server}/chat/completions"
        try:
            try:
                data = post_retrying(self.cfg, url, chat_payload(req, self.model_id, self._schema_dialect))
            except HTTPFailure as exc:
                # llama-cpp-python answers a validation error with 500 naming 'json_object'.
                rejected = exc.status in (400, 422) or (exc.status == 500 and "json_object" in str(exc))
                if req.json_schema is None or not rejected or self._schema_dialect != "json_schema":
                    raise
                with self._lock:
                    self._schema_dialect = "json_object"
                log.info("openai_http: server rejected response_format json_schema; using json_object+schema")
                data = post_retrying(self.cfg, url, chat_payload(req, self.model_id, self._schema_dialect))
            dialect = self._schema_dialect if req.json_schema is not None else None
            return chat_result(data, t0, {"schema_dialect": dialect, "server": server})
        except (HTTPFailure, KeyError, IndexError, TypeError, ValueError) as exc:
            return error_result(exc, t0, server)

    def generate(self, requests: list[ChatRequest]) -> list[ChatResult]:
        """Send all requests, ``concurrency`` per server at a time, over every server that
        still answers (see the module docstring); results in input order; never raises."""
        if not requests:
            return []
        return run_on_fleet(self.servers, requests, self.cfg.concurrency, self._one,
                            lambda server, res: count_answer(self.server_stats[server], res))

    # --------------------------------------------------------------- token counts
    def count_tokens(self, messages: tuple[ChatMessage, ...]) -> int:
        """Server-side count where the server offers one (vLLM ``/tokenize`` with the chat
        template; llama-cpp-python ``/extras/tokenize/count`` on the concatenated text plus
        a per-turn allowance), else a conservative estimate of 1 token per 3 characters."""
        root = self.base_url.removesuffix("/v1")
        routes = [self._count_route] if self._count_route else ["vllm", "llama_cpp_python", "estimate"]
        for route in routes:
            try:
                n = count_by_route(route, root, self.model_id, messages, self.cfg.api_key)
            except (HTTPFailure, KeyError, TypeError, ValueError):
                continue
            self._count_route = route
            return n
        return estimate_tokens(messages)

    def close(self) -> None:
        """Nothing to release: the server owns the model."""
