"""Login sessions of the page, kept server-side in ``DATA/sessions.json`` (only with a token).

A login makes a random session id (``secrets.token_urlsafe(32)``), sent as the ``sl_session``
cookie with ``Max-Age`` set to the session's lifetime (``--session-hours``, 12 by default).
The file keeps only the SHA-256 of each id (reading ``--data`` gives no working cookie) with
its expiry, and a fingerprint of the token (an HMAC with the server's secret): a server
started with another token drops every session, so changing the token logs everyone out.
Logout deletes the session; an expired one is refused and dropped. At most ``MAX_SESSIONS``
are kept (the oldest go first). The file is written atomically on every change (mode 0600).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import threading
import time
from collections.abc import Callable
from pathlib import Path

import orjson

from sanctuary_local.errors import UserError
from sanctuary_local.io.safe_io import atomic_write_bytes, read_regular

__all__ = ["DEFAULT_SESSION_HOURS", "MAX_SESSIONS", "Sessions"]

#: Hours a login lasts unless ``--session-hours`` says otherwise.
DEFAULT_SESSION_HOURS = 12.0
#: Sessions kept at once (a login beyond it ends the oldest one).
MAX_SESSIONS = 1000
#: Largest ``sessions.json`` read back (1,000 sessions take about 100 kB).
MAX_FILE_BYTES = 1 << 20

log = logging.getLogger("sanctuary_serve")


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode("utf-8", "replace")).hexdigest()


class Sessions:
    """The live sessions of one ``--data`` folder (see the module docstring)."""

    def __init__(self, data: Path, secret: bytes, token: str, lifetime_s: float,
                 clock: Callable[[], float] = time.time) -> None:
        self.path, self.lifetime_s, self.clock = Path(data) / "sessions.json", float(lifetime_s), clock
        self.fingerprint = hmac.new(secret, f"token:{token}".encode(), hashlib.sha256).hexdigest()
        self._lock = threading.Lock()
        self._live: dict[str, float] = {}  # sha256(id) -> expiry (epoch seconds), oldest first
        try:
            saved = orjson.loads(read_regular(self.path, MAX_FILE_BYTES, "sessions file", follow=False))
        except FileNotFoundError:
            return
        except (OSError, UserError, orjson.JSONDecodeError):
            saved = {}  # unreadable: no session survives it (everyone logs in again)
        if isinstance(saved, dict) and saved.get("token") == self.fingerprint and isinstance(saved.get("sessions"), dict):
            now = self.clock()
            self._live = {k: float(v) for k, v in saved["sessions"].items()
                          if isinstance(k, str) and isinstance(v, (int, float)) and v > now}
        if self._live != (saved.get("sessions") if isinstance(saved, dict) else None):
            self._save()  # another token, expired or unreadable sessions: they end here

    @property
    def max_age(self) -> int:
        """The cookie's ``Max-Age``: the session's lifetime in whole seconds (at least 1)."""
        return max(1, round(self.lifetime_s))

    def start(self) -> str:
        """A new session's id (the cookie value), kept until it expires or logs out."""
        session_id = secrets.token_urlsafe(32)
        with self._lock:
            self._prune()
            while len(self._live) >= MAX_SESSIONS:
                del self._live[next(iter(self._live))]
            self._live[_digest(session_id)] = self.clock() + self.lifetime_s
            self._save()
        return session_id

    def valid(self, session_id: str) -> bool:
        """Whether ``session_id`` names a live session (an expired one is dropped)."""
        if not session_id:
            return False
        key = _digest(session_id)
        with self._lock:
            expires = self._live.get(key)
            if expires is None:
                return False
            if expires > self.clock():
                return True
            del self._live[key]
            self._save()
            return False

    def end(self, session_id: str) -> None:
        """Log out: the session is deleted (an unknown id is ignored)."""
        with self._lock:
            if self._live.pop(_digest(session_id or ""), None) is not None:
                self._save()

    def __len__(self) -> int:
        with self._lock:
            self._prune()
            return len(self._live)

    def _prune(self) -> None:
        now = self.clock()
        for key in [k for k, exp in self._live.items() if exp <= now]:
            del self._live[key]

    def _save(self) -> None:
        try:
            atomic_write_bytes(self.path, orjson.dumps({"token": self.fingerprint, "sessions": self._live}), mode=0o600)
        except OSError as exc:  # the session still works in memory; a restart then asks for a login again
            log.warning("cannot write %s: %s", self.path, exc.strerror or exc)
