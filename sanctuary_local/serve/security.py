"""What keeps the server safe to run next to untrusted documents and browsers.

- ``SecurityMiddleware`` (ASGI, outermost): a request body over ``max_body`` bytes gets 413
  before any handler reads it, and one that does not arrive within ``body_timeout_s`` 408;
  a ``Host`` that is not the server's own gets 421 (a web page cannot reach a loopback
  server through DNS rebinding), and so does one that is not exactly a host and an optional
  port (``127.0.0.1:8000@evil.example``); a state-changing API call (not GET, HEAD,
  OPTIONS) that a browser says comes from another origin (``Origin``, ``Sec-Fetch-Site``)
  gets 403; every response gets a Content-Security-Policy that runs no script at all (the
  app has none), no framing, no sniffing, no referrer.
- ``Guard``: the bearer token of the API and the login session of the pages (only when a
  token is set; a non-loopback ``--host`` needs one; ``sessions``: a random id per login,
  kept server-side; ``throttle``: token guesses slowed, then refused, per client address),
  and CSRF tokens for the forms: an HMAC of a random per-browser cookie (``sl_sid``,
  SameSite=Strict) with the server's secret.
- ``corpus_file``: a file of the corpus by its indexed path, canonical and inside the
  corpus root, or None (``../``, absolute paths, symlinks out of the corpus, unindexed files).
  ``IndexedFiles``: the files the index lists, read again when it is re-indexed.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import os
import re
import secrets
import threading
import urllib.parse
from collections.abc import Awaitable, Callable, Container, MutableMapping
from pathlib import Path
from typing import Any

import orjson

from sanctuary_local.errors import UserError
from sanctuary_local.io.safe_io import atomic_write_bytes
from sanctuary_local.serve.sessions import Sessions
from sanctuary_local.serve.throttle import Throttle

__all__ = ["CSP", "FILE_CSP", "Guard", "IndexedFiles", "SecurityMiddleware", "corpus_file", "foreign_origin", "host_allowed",
           "is_loopback", "load_secret", "split_host"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

#: The app's pages: their own stylesheet and nothing else; no script from anywhere.
CSP = ("default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
       "frame-ancestors 'none'; base-uri 'none'")
#: A corpus file served as it is: a sandbox with no script, no origin, nothing loaded.
FILE_CSP = "sandbox; default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'none'"
SID_COOKIE, SESSION_COOKIE = "sl_sid", "sl_session"


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback address (127.0.0.0/8, ::1)."""
    host = host.strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


#: A ``Host`` header: a name or IPv4 address, or an IPv6 address in brackets; then an optional port.
_HOST = re.compile(r"(?:(?P<name>[A-Za-z0-9._-]+)|\[(?P<ip6>[0-9A-Fa-f:.]+)\])(?::(?P<port>[0-9]{1,5}))?")
#: Methods that change nothing (the others need a same-origin caller on the API).
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


def split_host(host_header: str) -> tuple[str, int | None] | None:
    """``(host, port)`` of a ``Host`` header taken exactly (RFC 9110: ``host [":" port]``),
    or None for anything else: userinfo, a path, spaces, a second colon, a port over 65535."""
    m = _HOST.fullmatch(host_header)
    if m is None or (m["port"] is not None and int(m["port"]) > 65535):
        return None
    return m["name"] or m["ip6"], None if m["port"] is None else int(m["port"])


def host_allowed(host_header: str, bound: str) -> bool:
    """Whether a request's ``Host`` may reach a server bound to ``bound``: any loopback name
    for a loopback server (never a DNS name that merely resolves to it), any well-formed host
    otherwise (the token guards a server on the network; HTTP/1.0 may send none)."""
    parsed = split_host(host_header)
    if not is_loopback(bound):
        return parsed is not None or host_header == ""
    return parsed is not None and is_loopback(parsed[0])


def foreign_origin(headers: dict[str, str]) -> bool:
    """Whether a browser says this request comes from another site or origin: a
    ``Sec-Fetch-Site`` of ``cross-site`` or ``same-site``, or an ``Origin`` (``null`` included)
    that is not ``http(s)://`` + this request's ``Host``. A client that sends neither (curl, a
    script) is not a browser page and passes."""
    if headers.get("sec-fetch-site", "").lower() in ("cross-site", "same-site"):
        return True
    origin = headers.get("origin")
    if origin is None:
        return False
    parts = urllib.parse.urlsplit(origin)
    return parts.scheme not in ("http", "https") or parts.netloc.lower() != headers.get("host", "").lower()


def load_secret(data: Path) -> bytes:
    """The server's HMAC key, kept in ``DATA/secret`` (mode 0600) so a restart keeps open forms
    valid. A new key is written atomically (a temp file in ``DATA``, fsync, rename), so a
    failed write leaves no partial secret; it is a one-line ``UserError``."""
    path = data / "secret"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as fh:
            key = fh.read(64)
        if len(key) == 32:
            return key
    except OSError:
        pass
    key = secrets.token_bytes(32)
    try:
        atomic_write_bytes(path, key, mode=0o600)
    except OSError as exc:
        raise UserError(f"cannot write the server's secret {path}: {exc.strerror or exc} "
                        "(--data must be a writable folder on a disk with room)") from None
    return key


class Guard:
    """Token checks (API and pages; throttled per client address), login sessions, and CSRF
    tokens (forms). ``sessions`` is None exactly when no token is set."""

    def __init__(self, secret: bytes, token: str | None, sessions: Sessions | None = None,
                 throttle: Throttle | None = None) -> None:
        self.secret, self.token = secret, token or None
        self.sessions, self.throttle = sessions, throttle or Throttle()
        if self.token is not None and sessions is None:
            raise ValueError("a Guard with a token needs its Sessions")

    def _mac(self, what: str) -> str:
        return hmac.new(self.secret, what.encode("utf-8"), hashlib.sha256).hexdigest()

    @property
    def required(self) -> bool:
        return self.token is not None

    def _matches(self, value: str) -> bool:
        return self.token is not None and hmac.compare_digest(value.strip().encode(), self.token.encode())

    async def bearer_ok(self, authorization: str | None, client: str) -> bool:
        """The API's ``Authorization: Bearer TOKEN`` (always true without a token); a wrong
        one sent counts against ``client`` (``Throttled`` when it is blocked)."""
        if self.token is None:
            return True
        if not authorization:
            return False
        scheme, _, value = authorization.partition(" ")
        return await self.throttle.check(client, lambda: scheme.lower() == "bearer" and self._matches(value))

    async def token_ok(self, value: str, client: str) -> bool:
        """The login form's token; a wrong one counts against ``client`` (``Throttled``)."""
        return self.token is not None and await self.throttle.check(client, lambda: self._matches(value))

    def cookie_ok(self, cookies: dict[str, str]) -> bool:
        """A page request's login session (always true without a token)."""
        return self.sessions is None or self.sessions.valid(cookies.get(SESSION_COOKIE, ""))

    def csrf_for(self, sid: str) -> str:
        return self._mac(f"csrf:{sid}")

    def csrf_ok(self, sid: str | None, sent: str | None) -> bool:
        """A form's CSRF field matches this browser's ``sl_sid`` cookie."""
        if not sid or not sent:
            return False
        return hmac.compare_digest(self.csrf_for(sid).encode(), sent.encode())


class IndexedFiles:
    """The files the corpus index's live generation lists (``path in files``), read again
    when ``sanctuary-local index`` writes a new generation while the server runs."""

    def __init__(self, corpus: Path) -> None:
        self.corpus, self._seen, self._files = Path(corpus), b"", frozenset[str]()
        self._lock = threading.Lock()
        self._current()

    def _current(self) -> frozenset[str]:
        from sanctuary_local.corpus.index import CURRENT, live_manifest

        try:
            seen = (self.corpus / CURRENT).read_bytes()
        except OSError:
            return self._files
        with self._lock:
            if seen != self._seen:
                try:
                    self._files = frozenset(live_manifest(self.corpus)[1].get("files") or {})
                    self._seen = seen
                except UserError:  # a generation being replaced: the last one read stands
                    pass
            return self._files

    def __contains__(self, path: object) -> bool:
        return path in self._current()


def corpus_file(root: Path, rel: str, indexed: Container[str]) -> Path | None:
    """The corpus file ``rel`` (a path the index lists) as a canonical path inside ``root``;
    None for anything else (see the module docstring)."""
    if not rel or "\x00" in rel or rel.startswith(("/", "\\")) or ".." in Path(rel).parts or rel not in indexed:
        return None
    base = Path(os.path.realpath(root))
    target = Path(os.path.realpath(base / rel))
    if not target.is_relative_to(base) or not target.is_file():
        return None
    return target


class SecurityMiddleware:
    """Body cap, Host check and security headers for every request (see the module docstring)."""

    def __init__(self, app: Callable[..., Awaitable[None]], *, max_body: int, bound_host: str,
                 body_timeout_s: float | None = None) -> None:
        self.app, self.max_body, self.bound_host, self.body_timeout_s = app, max_body, bound_host, body_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if not host_allowed(headers.get("host", ""), self.bound_host):
            return await _plain(send, 421, "this server answers only to its own address (a loopback name)"
                                if is_loopback(self.bound_host) else "the Host header is not a host and a port")
        if scope["path"].startswith("/api/") and scope["method"] not in SAFE_METHODS and foreign_origin(headers):
            return await _plain(send, 403, "refused: this API call comes from another site's page (Origin, "
                                "Sec-Fetch-Site); call the API from a script or this server's own pages")
        length = headers.get("content-length", "")
        if length and (not length.isdigit() or int(length) > self.max_body):
            return await _plain(send, 413, f"request body too large: at most {self.max_body} bytes")
        try:
            body = await asyncio.wait_for(_read_body(receive, self.max_body), self.body_timeout_s)
        except asyncio.TimeoutError:  # a body sent a byte at a time holds its connection: closed
            return await _plain(send, 408, f"the request body did not arrive within {self.body_timeout_s:g} s",
                                close=True)
        if body is None:
            return await _plain(send, 413, f"request body too large: at most {self.max_body} bytes")
        await self.app(scope, _replay(body), _with_headers(send))


async def _read_body(receive: Receive, cap: int) -> bytes | None:
    """The whole request body, or None once it passes ``cap`` bytes."""
    parts, size = [], 0
    while True:
        msg = await receive()
        if msg["type"] != "http.request":
            break
        chunk = msg.get("body", b"")
        size += len(chunk)
        if size > cap:
            return None
        parts.append(chunk)
        if not msg.get("more_body", False):
            break
    return b"".join(parts)


def _replay(body: bytes) -> Receive:
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return {"type": "http.disconnect"}

    return receive


def _with_headers(send: Send) -> Send:
    async def wrapped(msg: Message) -> None:
        if msg["type"] == "http.response.start":
            headers = list(msg.get("headers", []))
            have = {k.lower() for k, _ in headers}
            for name, value in ((b"content-security-policy", CSP), (b"x-content-type-options", "nosniff"),
                                (b"referrer-policy", "no-referrer"), (b"x-frame-options", "DENY"),
                                (b"cross-origin-opener-policy", "same-origin"), (b"cache-control", "no-store")):
                if name not in have:
                    headers.append((name, value.encode("latin-1")))
            msg = {**msg, "headers": headers}
        await send(msg)

    return wrapped


async def _plain(send: Send, status: int, message: str, close: bool = False) -> None:
    """A JSON error answered before the app (``{"error": message}``); ``close``: and the
    connection is closed after it."""
    body = orjson.dumps({"error": message})
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await _with_headers(send)({"type": "http.response.start", "status": status,
                               "headers": headers + ([(b"connection", b"close")] if close else [])})
    await send({"type": "http.response.body", "body": body})
