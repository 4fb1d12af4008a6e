"""Bounded connections: a header timeout and a cap on open connections, for uvicorn.

uvicorn (0.54) has neither: its ``timeout_keep_alive`` runs only between two requests, so a
client that opens a connection and never finishes its headers (slowloris) holds it, and a
file descriptor, for ever; its ``limit_concurrency`` is checked only once a request's
headers are in, which a stalled request never reaches. ``bounded_protocol`` is uvicorn's
h11 protocol with both added:

- **header timeout**: a connection whose request headers are not all in ``header_timeout_s``
  seconds after it opened (or after its previous response) gets 408 and is closed. The body
  has the same time once the headers are in (``SecurityMiddleware``: 408);
- **connection cap**: a connection opened while ``max_connections`` are open gets 503 at
  once and is closed, so stalled clients can never exhaust the server's file descriptors
  (``ensure_fd_room`` checks at start that the process may open that many and more).

uvicorn's own ``limit_concurrency`` is set one above the cap, as a backstop that never fires
first. The h11 protocol is always used (never httptools, even where it is installed): the
one this subclass is written against.
"""

from __future__ import annotations

import asyncio
import resource
from typing import Any

from sanctuary_local.errors import UserError

__all__ = ["DEFAULT_HEADER_TIMEOUT_S", "DEFAULT_MAX_CONNECTIONS", "FD_HEADROOM", "bounded_protocol", "ensure_fd_room"]

#: Seconds a client has to send a request's headers (and then its body).
DEFAULT_HEADER_TIMEOUT_S = 10.0
#: Connections open at once; one more gets 503.
DEFAULT_MAX_CONNECTIONS = 512
#: File descriptors the server needs besides its connections (index, models, check files, logs).
FD_HEADROOM = 256


def _answer(status: int, reason: str, text: str) -> bytes:
    body = text.encode()
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain; charset=utf-8\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode() + body


def bounded_protocol(header_timeout_s: float, max_connections: int) -> type[asyncio.Protocol]:
    """uvicorn's ``H11Protocol`` with the header timeout and the connection cap (module docstring)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    timed_out = _answer(408, "Request Timeout", f"the request headers did not arrive within {header_timeout_s:g} s\n")
    too_many = _answer(503, "Service Unavailable", "too many open connections; try again later\n")

    class BoundedH11Protocol(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None
        _refused = False

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                self._refuse(too_many)
            else:
                self._arm()

        def data_received(self, data: bytes) -> None:
            if not self._refused:
                super().data_received(data)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()  # the next request's headers get the same time

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            if not self.transport.is_closing():
                self._header_timer = self.loop.call_later(header_timeout_s, self._header_deadline)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _header_deadline(self) -> None:
            self._header_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():  # still no whole request head
                self._refuse(timed_out)

        def _refuse(self, answer: bytes) -> None:
            self._refused = True
            self._disarm()
            self.transport.write(answer)
            self.transport.close()

    return BoundedH11Protocol


def ensure_fd_room(max_connections: int) -> None:
    """Raise the process's open-file limit to ``max_connections + FD_HEADROOM`` when it is
    lower and the hard limit allows; else a one-line ``UserError`` naming the most it allows."""
    need = max_connections + FD_HEADROOM
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    if hard == resource.RLIM_INFINITY or hard >= need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
        return
    raise UserError(f"--max-connections {max_connections} needs {need} open files, but this process may open at most "
                    f"{hard} (ulimit -Hn); give at most {max(1, hard - FD_HEADROOM)}")
