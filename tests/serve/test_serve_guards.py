"""The pure parts of issue 68's guards, with a clock the test moves: login sessions
(``serve/sessions.py``), the token throttle (``serve/throttle.py``), the exact ``Host``
parser and the ``Origin`` check (``serve/security.py``), the visible-claim rule
(``serve/routes.py``) and the open-file check of ``--max-connections``. The real-server
tests are test_serve_sessions.py, test_serve_connections.py and test_serve_defects.py."""

from __future__ import annotations

import asyncio
import resource
from pathlib import Path

import pytest

from sanctuary_local.errors import UserError
from sanctuary_local.serve.connections import FD_HEADROOM, ensure_fd_room
from sanctuary_local.serve.routes import ClaimError, parse_claim
from sanctuary_local.serve.security import foreign_origin, host_allowed, split_host
from sanctuary_local.serve.sessions import MAX_SESSIONS, Sessions
from sanctuary_local.serve.throttle import BLOCK_FAILURES, FREE_FAILURES, Throttle, Throttled, client_key

SECRET = b"k" * 32


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_sessions_expire_end_and_do_not_survive_a_new_token(tmp_path: Path) -> None:
    clock = Clock()
    sessions = Sessions(tmp_path, SECRET, "token-one-0123456789", 3600, clock=clock)
    assert not (tmp_path / "sessions.json").exists()  # nothing written before the first login
    a, b = sessions.start(), sessions.start()
    assert a != b and sessions.valid(a) and sessions.valid(b) and sessions.max_age == 3600
    sessions.end(a)
    assert not sessions.valid(a) and sessions.valid(b)
    clock.now += 3599
    assert Sessions(tmp_path, SECRET, "token-one-0123456789", 3600, clock=clock).valid(b)  # read back from disk
    clock.now += 2
    assert not sessions.valid(b) and len(sessions) == 0  # expired
    c = sessions.start()
    assert not Sessions(tmp_path, SECRET, "token-two-0123456789", 3600, clock=clock).valid(c)
    assert not Sessions(tmp_path, SECRET, "token-one-0123456789", 3600, clock=clock).valid(c)  # gone for good
    assert not sessions.valid("") and not sessions.valid("x" * 43)


def test_sessions_are_bounded_and_an_unreadable_file_ends_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert MAX_SESSIONS == 1000
    monkeypatch.setattr("sanctuary_local.serve.sessions.MAX_SESSIONS", 20)  # each login writes the file: keep it short
    sessions = Sessions(tmp_path, SECRET, "token-one-0123456789", 60)
    first, second = sessions.start(), sessions.start()
    for _ in range(19):
        sessions.start()
    assert len(sessions) == 20 and not sessions.valid(first) and sessions.valid(second)  # the oldest went
    (tmp_path / "sessions.json").write_text("{not json")
    assert len(Sessions(tmp_path, SECRET, "token-one-0123456789", 60)) == 0


def test_the_throttle_delays_doubling_then_blocks_then_forgets(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    throttle = Throttle(clock=clock)
    slept: list[float] = []

    async def sleep(seconds: float) -> None:  # the clock moves instead
        clock.now += seconds

    monkeypatch.setattr("sanctuary_local.serve.throttle.asyncio.sleep", sleep)

    async def guess(ok: bool = False) -> bool:
        slept.append(throttle.delay_s("10.0.0.7"))
        return await throttle.check("10.0.0.7", lambda: ok)

    async def run() -> None:
        for _ in range(BLOCK_FAILURES):
            assert await guess() is False
        with pytest.raises(Throttled) as blocked:
            await guess(ok=True)  # the right token is refused too
        assert 1 <= blocked.value.retry_after <= 60
        assert await throttle.check("10.0.0.8", lambda: True)  # another address is not touched

    asyncio.run(run())
    assert slept[:FREE_FAILURES] == [0.0] * FREE_FAILURES
    assert slept[FREE_FAILURES:FREE_FAILURES + 5] == [0.25, 0.5, 1.0, 2.0, 4.0] and max(slept) == 4.0
    clock.now += 61
    assert throttle.delay_s("10.0.0.7") == 0.0  # a minute later the failures are forgotten


def test_client_keys() -> None:
    assert client_key("10.0.0.7") == "10.0.0.7" and client_key("::ffff:10.0.0.7") == "10.0.0.7"
    assert client_key("2001:db8::1") == client_key("2001:db8::2") == "2001:db8::/64"


@pytest.mark.parametrize("header,expected", [
    ("127.0.0.1:8000", ("127.0.0.1", 8000)), ("localhost", ("localhost", None)), ("[::1]:80", ("::1", 80)),
    ("example.org", ("example.org", None)), ("127.0.0.1:8000@evil.example", None), ("127.0.0.1:8000/x", None),
    ("127.0.0.1:", None), ("127.0.0.1:65536", None), ("user@127.0.0.1", None), ("[::1", None), ("a b", None),
    ("", None), ("127.0.0.1:8000:1", None)])
def test_the_host_header_is_split_exactly(header: str, expected: tuple[str, int | None] | None) -> None:
    assert split_host(header) == expected


def test_host_allowed() -> None:
    assert host_allowed("127.0.0.1:8000", "127.0.0.1") and not host_allowed("127.0.0.1:8000@evil.example", "127.0.0.1")
    assert host_allowed("news.example:8000", "0.0.0.0") and not host_allowed("news.example@x", "0.0.0.0")
    assert host_allowed("", "0.0.0.0") and not host_allowed("", "127.0.0.1")


def test_foreign_origin() -> None:
    host = {"host": "127.0.0.1:8000"}
    assert not foreign_origin(host) and not foreign_origin({**host, "origin": "http://127.0.0.1:8000"})
    assert foreign_origin({**host, "origin": "http://evil.example"}) and foreign_origin({**host, "origin": "null"})
    assert foreign_origin({**host, "sec-fetch-site": "cross-site"}) and foreign_origin({**host, "sec-fetch-site": "same-site"})
    assert not foreign_origin({**host, "sec-fetch-site": "same-origin"}) and not foreign_origin({**host, "sec-fetch-site": "none"})


@pytest.mark.parametrize("claim", ["\u3164", "\u0301", "\u3164\u0301\u200b \n", "\ufe0f", "\U000e0101", "\u115f!?"])
def test_a_claim_needs_a_visible_letter_or_digit(claim: str) -> None:
    with pytest.raises(ClaimError, match="no visible letter or digit"):
        parse_claim(claim, None)


@pytest.mark.parametrize("claim", ["e\u0301", "\u3164 7", "\u05e9\u05dc\u05d5\u05dd", "\u0928\u092e\u0938\u094d\u0924\u0947"])
def test_a_claim_with_a_visible_letter_or_digit_is_taken(claim: str) -> None:
    assert parse_claim(claim, None)[0] == claim.strip()


def test_max_connections_must_fit_the_open_file_limit() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY:
        pytest.skip("no hard limit on open files here")
    with pytest.raises(UserError, match="--max-connections"):
        ensure_fd_room(hard)  # needs hard + FD_HEADROOM
    ensure_fd_room(max(1, hard - FD_HEADROOM))  # fits: raised to it if need be
