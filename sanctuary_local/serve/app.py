"""The server: settings, the Starlette app and its lifetime under uvicorn.

``check_settings`` refuses bad settings (``--profile``/``--set`` included: the config is
resolved and its models looked up, none loaded) before anything is bound or written;
``create_app`` wires the store, the queue, the guard and the routes together; ``run_server``
checks the settings, binds the socket itself before it creates ``--data`` (a port in use is
a one-line error and leaves nothing behind, port 0 picks a free one; a ``--data`` that
cannot be written is one too, and what the start created there is removed), prints the
address (and a warning when the traffic or the token can be seen by others), and serves
until SIGTERM or Ctrl-C. Stopping: uvicorn stops accepting and gives open requests
``HTTP_GRACE_S``, then the queue asks the check in flight to stop at its next stop point
and waits ``stop_grace_s`` for it; a check that is still generating is left queued on disk (its
finished stages are in its stage files) and resumes at the next start. Every process the
server started is then ended, one line says what became of the checks, and the process exits
at once, 130 after Ctrl-C and 143 after SIGTERM (``serve/stopping.py``): within 5 s of the
signal. An ``OrphanGuard`` ends any process a backend started if the server is killed.
"""

from __future__ import annotations

import contextlib
import logging
import os
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
#: Longest ``--session-hours`` and ``--header-timeout`` (seconds) accepted.
MAX_SESSION_HOURS, MAX_HEADER_TIMEOUT_S = 8760, 3600.0


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
    token_in_argv: bool = False
    """The token was typed on the command line (other local users see it in ``ps``)."""
    max_queued: int = 100
    """Checks that may wait; one more gets 429."""
    max_body: int = 64 * 1024
    """Largest request body in bytes (413 above)."""
    overrides: dict[str, Any] | None = None
    models_dir: str | None = None
    stop_grace_s: float = 3.0
    """Seconds the check in flight has to reach a stop point when the server stops."""
    session_hours: float = 12.0
    """How long a page login lasts (the session cookie's ``Max-Age``)."""
    header_timeout_s: float = 10.0
    """Seconds a client has to send a request's headers, then its body (408 and closed after)."""
    max_connections: int = 512
    """Connections open at once; one more gets 503 and is closed (``serve/connections.py``)."""


def check_settings(s: ServeSettings) -> None:
    """Refuse what must not run, before anything is bound or written (one line each, exit 2):
    an open server without a token, a token that could never match, a port or body cap out
    of range, a folder that is no index, a ``--data`` inside the index, a ``--profile`` or
    ``--set`` that does not load (the config is resolved here; no model is loaded), a model
    or package of it that is not installed (``check_models``)."""
    if s.token is not None:
        _check_token(s.token)
    if not is_loopback(s.host) and not s.token:
        raise UserError(f"--host {s.host} is not a loopback address: anyone who can reach it could use the server; "
                        "give --token (or SANCTUARY_SERVE_TOKEN) to require it, or keep the default 127.0.0.1")
    if not 0 <= s.port <= 65535:
        raise UserError(f"--port must be in 0..65535 (0: any free port), got {s.port}")
    if s.max_queued < 1:
        raise UserError("--max-queue must be at least 1")
    if s.max_body < 1024:
        raise UserError(f"--max-body-kb must be at least 1, got {s.max_body / 1024:g}")
    if not 0 < s.session_hours <= MAX_SESSION_HOURS:
        raise UserError(f"--session-hours must be above 0 and at most {MAX_SESSION_HOURS} (a year), got {s.session_hours:g}")
    if not 0 < s.header_timeout_s <= MAX_HEADER_TIMEOUT_S:
        raise UserError(f"--header-timeout must be above 0 and at most {MAX_HEADER_TIMEOUT_S:g} s, got {s.header_timeout_s:g}")
    if s.max_connections < 1:
        raise UserError(f"--max-connections must be at least 1, got {s.max_connections}")
    from sanctuary_local.corpus.index import corpus_problem

    if problem := corpus_problem(Path(s.corpus), "serve"):
        raise UserError(problem)
    if Path(s.data).resolve().is_relative_to(Path(s.corpus).resolve()):
        raise UserError(f"--data {s.data} is the corpus index {s.corpus} or inside it: the server would write its "
                        "checks into the index; give a folder outside it (the default: sanctuary-serve)")
    if (docs := _documents_root(Path(s.corpus))) and Path(s.data).resolve().is_relative_to(docs):
        raise UserError(f"--data {s.data} is inside the indexed documents folder {docs}: the next `index` of that "
                        "folder would read the server's checks and reports as documents; give a folder outside it")
    check_models(serve_config(s.profile, s.overrides, s.models_dir), s.profile)


def check_models(cfg: Any, profile: str) -> None:
    """Refuse a config whose models, or the packages its stages import (an LLM backend, the
    retrieval libraries; looked up, not imported), are not installed: one line naming each
    missing one and its fix, from ``doctor``'s cheap checks (a fetched model's files by name and size, an
    assembled GGUF by its verification record, not re-hashed; part wheels by their metadata;
    the packaged embedder and verdict model, tens of MB, by their SHA-256: ~0.2 s in all).
    Nothing is loaded, assembled or distilled; a model the first check will assemble or
    distil from what is installed passes (``doctor``'s ``later``)."""
    from sanctuary_local.machine.doctor import FAIL, check_packages
    from sanctuary_local.machine.doctor import check_models as doctor_rows

    hint = f"`sanctuary-local doctor --profile {profile}` checks everything the profile needs"
    for what, rows in (("a model", doctor_rows(cfg)), ("a package", check_packages(cfg))):
        if bad := [row for row in rows if row.status == FAIL]:
            said = "; ".join(f"{row.item}: {row.detail}" + (f" (fix: {row.fix.rstrip('.')})" if row.fix else "")
                             for row in bad)
            raise UserError(" ".join(f"cannot serve: {what} is not installed: {said}; {hint}".split()))


def _documents_root(corpus: Path) -> Path | None:
    """The folder the index was built from (its manifest's ``root``), or None."""
    from sanctuary_local.corpus.index import live_manifest

    root = live_manifest(corpus)[1].get("root")
    return Path(root).resolve() if root else None


def _check_token(token: str) -> None:
    """A token a client can send: printable ASCII, no whitespace at either end (a sent token
    is stripped, and HTTP headers carry no other characters as they were typed)."""
    if token != token.strip():
        raise UserError("--token begins or ends with whitespace: a token sent to the server is read without it, "
                        "so it could never match; remove it")
    if not (token.isascii() and token.isprintable()):
        raise UserError("--token must be printable ASCII: other characters do not reach the server "
                        "as they were typed in an HTTP header, so it could never match")
    if len(token) < MIN_TOKEN_CHARS:
        raise UserError(f"--token must be at least {MIN_TOKEN_CHARS} characters (it guards the server)")


def serve_config(profile: str, overrides: dict[str, Any] | None, models_dir: str | None) -> Any:
    """The config every check runs with (``--profile``, ``--set``, ``--models-dir``); a
    profile or override that does not load is a ``UserError``. Loads no model."""
    from sanctuary_local.config.settings import load_config

    cfg = load_config(profile, overrides)
    if models_dir:
        cfg.models_dir = models_dir
    return cfg


def create_app(s: ServeSettings) -> Any:
    """The ASGI app (Starlette) for these settings; its lifespan starts and stops the queue."""
    check_settings(s)
    return _app(s)


def _app(s: ServeSettings) -> Any:
    """``create_app`` for settings ``check_settings`` has passed: opens the index, then
    creates or opens ``--data`` (its lock, its secret)."""
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.routing import Route

    from sanctuary_local.corpus.index import CorpusIndex
    from sanctuary_local.serve import api
    from sanctuary_local.serve import routes as r
    from sanctuary_local.serve.deletion import api_delete, delete_form
    from sanctuary_local.serve.jobs import CheckStore
    from sanctuary_local.serve.queue import CheckQueue
    from sanctuary_local.serve.security import Guard, IndexedFiles, SecurityMiddleware, load_secret
    from sanctuary_local.serve.sessions import Sessions

    index = CorpusIndex(s.corpus)  # before --data: an index that does not open leaves nothing written
    made = _absent(Path(s.data))
    try:
        store = CheckStore(s.data)
    except BaseException:
        index.close()
        _undo(made, Path(s.data), locked=False)
        raise
    try:
        root = Path(str(index.manifest.get("root") or s.corpus))
        queue = CheckQueue(store, s.corpus, s.profile, max_queued=s.max_queued, overrides=s.overrides,
                           models_dir=s.models_dir)
        secret = load_secret(store.data)
        sessions = Sessions(store.data, secret, s.token, s.session_hours * 3600) if s.token else None
        ctx = r.Context(store, queue, Guard(secret, s.token, sessions), Path(s.corpus), root,
                        IndexedFiles(Path(s.corpus)), Path(s.corpus).resolve().name)
    except BaseException:  # e.g. the secret cannot be written: leave --data as it was found
        _undo(made, Path(s.data), locked=True)
        store.close()
        raise
    finally:
        index.close()

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        queue.start()
        yield
        app.state.worker_ended = queue.stop(s.stop_grace_s)

    routes = [
        Route("/", r.home), Route("/checks", r.submit_form, methods=["POST"]), Route("/checks", r.form_url),
        Route("/checks/{check_id}", r.check_page), Route("/checks/{check_id}/download", r.download),
        Route("/checks/{check_id}/evidence/{n:int}", r.evidence_page), Route("/files/{path:path}", r.corpus_file_route),
        Route("/static/serve.css", r.stylesheet), Route("/login", r.login, methods=["GET", "POST"]),
        Route("/logout", r.logout, methods=["POST"]), Route("/checks/{check_id}/delete", delete_form, methods=["POST"]),
        Route("/api/checks", api.api_create, methods=["POST"]), Route("/api/checks", api.api_list),
        Route("/api/checks/{check_id}", api.api_get), Route("/api/checks/{check_id}", api_delete, methods=["DELETE"]),
        Route("/api/status", api.api_status),
    ]
    app = Starlette(routes=routes, lifespan=lifespan,
                    middleware=[Middleware(SecurityMiddleware, max_body=s.max_body, bound_host=s.host,
                                           body_timeout_s=s.header_timeout_s)])
    app.router.redirect_slashes = False  # an unknown path is a plain 404, never a Location built from Host
    app.state.ctx = ctx
    app.state.worker_ended = True
    return app


def _absent(data: Path) -> list[Path]:
    """What a start may create that is not there now, outermost first: the missing folders
    down to ``--data``, then what ``_app`` makes in it (``checks/``, ``serve.lock``, ``secret``)."""
    data = Path(os.path.abspath(data))
    inside = (data / "checks", data / "serve.lock", data / "secret")
    return [p for p in (*reversed(data.parents), data, *inside) if not os.path.lexists(p)]


def _undo(made: list[Path], data: Path, locked: bool) -> None:
    """Remove what a failed start created (``made``: ``_absent`` before it), innermost first;
    nothing that was there before is touched, and a folder only when it is empty. Without
    ``serve.lock`` held (``CheckStore`` refused), another server may have made the rest at the
    same moment: then only the empty folders down to ``--data`` go."""
    data = Path(os.path.abspath(data))
    for path in reversed(made):
        if not locked and path != data and path not in data.parents:
            continue
        with contextlib.suppress(OSError):
            if path.is_dir() and not path.is_symlink():
                path.rmdir()
            elif locked:
                path.unlink()


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


def exposure_warning(s: ServeSettings) -> str | None:
    """One line on what others may see: plain HTTP off loopback (the token included), a
    ``--token`` typed on the command line (``ps``); None when neither applies."""
    parts = []
    if not is_loopback(s.host):
        parts.append(f"--host {s.host} serves plain HTTP: the claims, the results and the token cross the network "
                     "unencrypted (off a trusted network, put a TLS reverse proxy in front)")
    if s.token is not None and s.token_in_argv:
        parts.append("--token on the command line is visible to other local users (ps); set SANCTUARY_SERVE_TOKEN instead")
    return "warning: " + "; ".join(parts) if parts else None


def _start(s: ServeSettings) -> tuple[Any, socket.socket, Any]:
    """Check the settings, bind, make the app (``--data``), print the address: the app, its
    socket and the uvicorn server to run it."""
    import uvicorn

    from sanctuary_local.serve.connections import bounded_protocol, ensure_fd_room

    check_settings(s)
    ensure_fd_room(s.max_connections)
    sock = bind(s.host, s.port)  # before --data is created: a port in use leaves nothing behind
    try:
        app = _app(s)
    except BaseException:
        sock.close()
        raise
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    if warning := exposure_warning(s):
        print(warning, file=sys.stderr, flush=True)
    print(f"serving http://{shown}:{port}/  corpus {s.corpus}  profile {s.profile}  data {s.data}"
          + ("  (token required)" if s.token else ""), file=sys.stderr, flush=True)
    _log_to_stderr()
    # uvicorn's limit_concurrency is checked only once a request's headers are in: one above
    # the cap, a backstop; the cap itself and the header timeout are in bounded_protocol
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on", server_header=False,
                            proxy_headers=False, timeout_graceful_shutdown=HTTP_GRACE_S,
                            http=bounded_protocol(s.header_timeout_s, s.max_connections),
                            limit_concurrency=s.max_connections + 1, timeout_keep_alive=5)
    return app, sock, uvicorn.Server(config)


def _log_to_stderr() -> None:
    """The server's own log lines (a throttled address, a sessions file not written) on
    stderr, one line each: logger ``sanctuary_serve``, not the package's, whose handler is
    the running check's ``run.log``."""
    serve_log = logging.getLogger("sanctuary_serve")
    if not serve_log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s warning: %(message)s", "%Y-%m-%d %H:%M:%S"))
        serve_log.addHandler(handler)
        serve_log.propagate = False


def run_server(s: ServeSettings) -> int:
    """Serve until SIGTERM/SIGINT (see the module docstring); the exit code: 128 + the signal
    (130 for Ctrl-C, 143 for SIGTERM), after one line saying what became of the checks, or
    ``aborted`` when the signal came while it started (``StartupStop``)."""
    from sanctuary_local.serve.stopping import SignalNote, StartupStop, end_children, stop_line

    starting = StartupStop().install()  # SIGTERM while starting: as Ctrl-C, exit 143
    try:
        app, sock, server = _start(s)
    except KeyboardInterrupt:  # ``_app`` undid what it had made in --data; a finished start is complete there
        end_children()
        print("aborted", file=sys.stderr, flush=True)
        return starting.exit_code

    from sanctuary_local.interrupt import exit_stopped
    from sanctuary_local.procs import OrphanGuard

    note = SignalNote().install()  # kept until the process exits (no KeyboardInterrupt in the last steps)
    ctx = app.state.ctx
    with OrphanGuard() as guard:
        server.run(sockets=[sock])
        if app.state.worker_ended:  # else a generation still runs in C code: its check is saved as queued
            ctx.queue.engine.shutdown()
        end_children(keep=(guard.pid,))  # a backend's server and what it started, whether or not they die with us
    print(stop_line(note.signum, ctx.store, ctx.queue.interrupted, ctx.queue.waiting(), Path(s.data)),
          file=sys.stderr, flush=True)
    if not app.state.worker_ended:
        exit_stopped(note.exit_code)
    ctx.store.close()
    return note.exit_code
