"""Throttling of token guesses, per client address (only with a token).

A failed ``POST /login`` and a wrong ``Authorization`` header (sent and not matching; a
request with none is not a guess) count as failures of the address they came from (an IPv6
client by its /64). Once an address has ``FREE_FAILURES`` failures in the last
``WINDOW_S`` seconds, each of its token checks first waits ``FIRST_DELAY_S``, doubling with
every further failure up to ``MAX_DELAY_S``; once it has ``BLOCK_FAILURES`` in the window,
every token check from it is answered 429 (``Retry-After``: until its oldest failure in the
window is a minute old), the right token included, so a guess learns nothing. The count is
read again after the wait, so guesses sent side by side never pass ``BLOCK_FAILURES`` in a
minute. One log line says when an address starts to be delayed and when it is blocked;
neither carries the token. Behind a reverse proxy every client has the proxy's address.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable

__all__ = ["BLOCK_FAILURES", "FREE_FAILURES", "Throttle", "Throttled"]

#: Failures in the window before token checks are delayed.
FREE_FAILURES = 5
#: Failures in the window after which every token check is answered 429.
BLOCK_FAILURES = 20
#: The window, in seconds.
WINDOW_S = 60.0
#: The first delay, doubled with every failure past ``FREE_FAILURES``, and the longest.
FIRST_DELAY_S, MAX_DELAY_S = 0.25, 4.0
#: Addresses remembered at once (the one seen longest ago is forgotten first).
MAX_ADDRESSES = 10_000

log = logging.getLogger("sanctuary_serve")


class Throttled(Exception):
    """Too many failures from this address: answer 429 with ``Retry-After: retry_after``."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"too many wrong tokens from this address; try again in {retry_after} s")
        self.retry_after = retry_after


def client_key(addr: str) -> str:
    """The address a failure is counted against: an IPv4 address, an IPv6 /64."""
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return addr
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


class Throttle:
    """Failures per address (see the module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._fails: OrderedDict[str, deque[float]] = OrderedDict()

    def _recent(self, key: str) -> deque[float]:
        fails = self._fails.get(key)
        if fails is None:
            return deque()
        edge = self.clock() - WINDOW_S
        while fails and fails[0] <= edge:
            fails.popleft()
        if not fails:
            del self._fails[key]
        return fails

    def delay_s(self, addr: str) -> float:
        """Seconds the next token check from ``addr`` waits (0 before ``FREE_FAILURES``)."""
        n = len(self._recent(client_key(addr)))
        return 0.0 if n < FREE_FAILURES else min(MAX_DELAY_S, FIRST_DELAY_S * 2 ** (n - FREE_FAILURES))

    def _refuse_if_blocked(self, key: str) -> None:
        fails = self._recent(key)
        if len(fails) >= BLOCK_FAILURES:
            raise Throttled(max(1, math.ceil(fails[0] + WINDOW_S - self.clock())))

    async def check(self, addr: str, ok: Callable[[], bool]) -> bool:
        """``ok()`` (the token check), after the wait this address has earned; a failure is
        counted. ``Throttled`` when the address is blocked (``ok`` is not called)."""
        key = client_key(addr)
        self._refuse_if_blocked(key)
        if wait := self.delay_s(addr):
            await asyncio.sleep(wait)
            self._refuse_if_blocked(key)  # others from the same address may have failed meanwhile
        if ok():
            return True
        self._fail(key)
        return False

    def _fail(self, key: str) -> None:
        fails = self._recent(key)
        fails.append(self.clock())
        self._fails[key] = fails
        self._fails.move_to_end(key)
        while len(self._fails) > MAX_ADDRESSES:
            self._fails.popitem(last=False)
        if len(fails) == FREE_FAILURES:
            log.warning("%d failed logins or bearer tokens from %s within %g s: its token checks are now delayed "
                        "(%g s, doubling up to %g s)", FREE_FAILURES, key, WINDOW_S, FIRST_DELAY_S, MAX_DELAY_S)
        elif len(fails) == BLOCK_FAILURES:
            log.warning("%d failed logins or bearer tokens from %s within %g s: its token checks are refused (429) "
                        "until they are fewer", BLOCK_FAILURES, key, WINDOW_S)
