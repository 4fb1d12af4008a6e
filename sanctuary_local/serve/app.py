"""The server: settings, the Starlette app and its lifetime under uvicorn.

``create_app`` wires the store, the queue, the guard and the routes together;
``run_server`` binds the socket itself (a port in use is a one-line error, port 0 picks a
free one), prints the address, and serves until SIGTERM or Ctrl-C. Stopping: uvicorn
stops accepting and gives open requests ``HTTP_GRACE_S``, then the queue asks the check
in flight to stop at its next stop point and waits ``stop_grace_s`` for it; a check that
is still generating is left queued on disk (its finished stages are in its stage files)
and resumes at the next start. The process then exits at once: within 5 s of the signal.
An ``OrphanGuard`` ends any process a backend started if the server is killed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sanctuary_local.errors import UserError
from sanctuary_local.serve.security import is_loopback

__all__ = ["ServeSettings", "create_app", "run_server"]

log = logging.getLogger("sanctuary_local")

#: Seconds open HTTP requests get when the server stops.
HTTP_GRACE_S = 1.0
#: Shortest ``--token`` accepted (it guards a server others can reach).
MIN_TOKEN_CHARS = 16


@dataclass(frozen=True)
class ServeSettings:
    """What ``sanctuary-local serve`` was asked to do."""

    corpus: Path
    """A corpus index written by ``sanctuary-local index``."""
    data: Path
    """Where the checks are kept (history, runs, the queue across restarts)."""
    profile: str = "cpu"
    host: str = "127.0.0.1"
    port: int = 8000
    token: str | None = None
    """Bearer token of the API and password of the page's login; required off loopback."""
    max_queued: int = 100
    """Checks that may wait; one more gets 429."""
    max_body: int = 64 * 1024
    """Largest request body in bytes (413 above)."""
    overrides: dict[str, Any] | None = None
    models_dir: str | None = None
    stop_grace_s: float = 3.0
    """Seconds the check in flight has to reach a stop point when the server stops."""


def check_settings(s: ServeSettings) -> None:
    """Refuse what must not run: an open server without a token, a folder that is no index."""
    from sanctuary_local.corpus.index import is_corpus_index

    if not is_loopback(s.host) and not s.token:
        raise UserError(f"--host {s.host} is not a loopback address: anyone who can reach it could use the server; "
                        "give --token (or SANCTUARY_SERVE_TOKEN) to require it, or keep the default 127.0.0.1")
    if s.token is not None and len(s.token) < MIN_TOKEN_CHARS:
        raise UserError(f"--token must be at least {MIN_TOKEN_CHARS} characters (it guards the server)")
    if not is_corpus_index(s.corpus):
        raise UserError(f"{s.corpus}: not a corpus index; build one with `sanctuary-local index DIR --out {s.corpus}`")
    if s.max_queued < 1:
        raise UserError("--max-queue must be at least 1")


def create_app(s: ServeSettings) -> Any:
    """The ASGI app (Starlette) for these settings; its lifespan starts and stops the queue."""
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.routing import Route

    from sanctuary_local.corpus.index import CorpusIndex
    from sanctuary_local.serve import routes as r
    from sanctuary_local.serve.jobs import CheckStore
    from sanctuary_local.serve.queue import CheckQueue
    from sanctuary_local.serve.security import Guard, SecurityMiddleware, load_secret

    check_settings(s)
    store = CheckStore(s.data)
    index = CorpusIndex(s.corpus)
    root = Path(str(index.manifest.get("root") or s.corpus))
    queue = CheckQueue(store, s.corpus, s.profile, max_queued=s.max_queued, overrides=s.overrides, models_dir=s.models_dir)
    ctx = r.Context(store, queue, Guard(load_secret(store.data), s.token), Path(s.corpus), root,
                    set(index.manifest.get("files") or {}), Path(s.corpus).resolve().name)
    index.close()

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        queue.start()
        yield
        app.state.worker_ended = queue.stop(s.stop_grace_s)

    routes = [
        Route("/", r.home), Route("/checks", r.submit_form, methods=["POST"]),
        Route("/checks/{check_id}", r.check_page), Route("/checks/{check_id}/download", r.download),
        Route("/checks/{check_id}/evidence/{n:int}", r.evidence_page), Route("/files/{path:path}", r.corpus_file_route),
        Route("/static/serve.css", r.stylesheet), Route("/login", r.login, methods=["GET", "POST"]),
        Route("/logout", r.logout, methods=["POST"]),
        Route("/api/checks", r.api_create, methods=["POST"]), Route("/api/checks", r.api_list),
        Route("/api/checks/{check_id}", r.api_get), Route("/api/status", r.api_status),
    ]
    app = Starlette(routes=routes, lifespan=lifespan,
                    middleware=[Middleware(SecurityMiddleware, max_body=s.max_body, bound_host=s.host)])
    app.state.ctx = ctx
    app.state.worker_ended = True
    return app


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: a free one), or a one-line ``UserError``."""
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(128)
    except OSError as exc:
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(False)
    return sock


def _ignore(signum: int, frame: Any) -> None:
    """What uvicorn's re-raised signal meets once it has stopped (the stop is already done)."""


def run_server(s: ServeSettings) -> int:
    """Serve until SIGTERM/SIGINT (see the module docstring); the exit code."""
    import uvicorn

    from sanctuary_local.procs import OrphanGuard

    app = create_app(s)
    sock = bind(s.host, s.port)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"serving http://{shown}:{port}/  corpus {s.corpus}  profile {s.profile}  data {s.data}"
          + ("  (token required)" if s.token else ""), file=sys.stderr, flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on", server_header=False,
                            proxy_headers=False, timeout_graceful_shutdown=HTTP_GRACE_S)
    server = uvicorn.Server(config)
    previous = {sig: signal.signal(sig, _ignore) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with OrphanGuard():
            server.run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print("stopped", file=sys.stderr, flush=True)
    if not app.state.worker_ended:  # a generation still runs in C code: its check is saved as queued
        logging.shutdown()
        os._exit(0)
    app.state.ctx.queue.engine.shutdown()
    app.state.ctx.store.close()
    return 0
