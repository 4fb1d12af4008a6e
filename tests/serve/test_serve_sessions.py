"""`sanctuary-local serve --token` on a shared host (issue 68, items 1 and 2), on real server
processes on loopback (the stand-in LLM of tests/support/serve_stub.py): a login is a random
session kept under --data, with a Max-Age, that logout ends, a restart keeps and a new token
ends; wrong tokens, at the login form or as bearer tokens, are slowed down after 5 and
refused (429) after 20 in a minute, per client address, and said so in the log without the
token. Before, the session cookie was an HMAC of the token: the same for every login, never
expiring, still valid after logout; and 60 wrong logins were answered in 0.08 s."""

from __future__ import annotations

import contextlib
import io
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sanctuary_local.cli import main
from tests.support.serve_support import Server, build_index

TOKEN = "s3cret-token-for-tests-0123"
OTHER_TOKEN = "another-token-for-tests-4567"
FORM = "application/x-www-form-urlencoded"


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory, repo_dir: Path) -> Path:
    return build_index(repo_dir / "examples" / "corpus", tmp_path_factory.mktemp("ix") / "index")


def login_form(server: Server) -> tuple[str, str]:
    """A browser's ``sl_sid`` cookie and the login form's CSRF token."""
    page = server.request("GET", "/login")
    sid = re.search(r"sl_sid=([^;]+)", page.headers["set-cookie"]).group(1)
    return sid, re.search(r'name="csrf" value="([0-9a-f]+)"', page.text).group(1)


def post_login(server: Server, token: str, sid: str, csrf: str):
    return server.request("POST", "/login", f"token={token}&csrf={csrf}".encode(),
                          {"content-type": FORM, "cookie": f"sl_sid={sid}"})


def login(server: Server, token: str = TOKEN) -> tuple[str, str, str]:
    """Log in as a new browser: its ``sl_sid``, the CSRF token and the session cookie's
    ``Set-Cookie`` header."""
    sid, csrf = login_form(server)
    reply = post_login(server, token, sid, csrf)
    assert reply.status == 303, reply.text[-500:]
    return sid, csrf, reply.headers["set-cookie"]


def session_of(set_cookie: str) -> str:
    return re.search(r"sl_session=([^;]+)", set_cookie).group(1)


def opens_home(server: Server, sid: str, session: str) -> bool:
    reply = server.request("GET", "/", headers={"cookie": f"sl_sid={sid}; sl_session={session}"})
    assert reply.status in (200, 303), reply.status
    return reply.status == 200


def test_each_login_is_its_own_session_that_logout_ends(index: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = Server(index, data, "--token", TOKEN)
    try:
        sid_a, csrf_a, cookie_a = login(server)
        sid_b, _, cookie_b = login(server)
        a, b = session_of(cookie_a), session_of(cookie_b)
        assert a != b and TOKEN not in cookie_a, (cookie_a, cookie_b)  # was HMAC(secret, token): the same for all
        assert re.search(r"(?i)max-age=43200\b", cookie_a), cookie_a  # 12 h by default
        assert re.search(r"(?i)httponly", cookie_a) and re.search(r"(?i)samesite=strict", cookie_a)
        assert opens_home(server, sid_a, a) and opens_home(server, sid_b, b)
        saved = (data / "sessions.json").read_text()
        assert a not in saved and b not in saved and TOKEN not in saved  # only digests are kept
        assert (data / "sessions.json").stat().st_mode & 0o077 == 0
        out = server.request("POST", "/logout", f"csrf={csrf_a}".encode(),
                             {"content-type": FORM, "cookie": f"sl_sid={sid_a}; sl_session={a}"})
        assert out.status == 303 and out.headers["location"] == "/login"
        assert not opens_home(server, sid_a, a)  # the old cookie no longer opens the page
        assert opens_home(server, sid_b, b)  # another browser's session goes on
        assert not opens_home(server, sid_a, "x" * 43)
    finally:
        server.close()
    again = Server(index, data, "--token", TOKEN, log=tmp_path / "again.log")  # a restart keeps the sessions
    try:
        assert opens_home(again, sid_b, b) and not opens_home(again, sid_a, a)
    finally:
        again.close()
    changed = Server(index, data, "--token", OTHER_TOKEN, log=tmp_path / "changed.log")  # a new token ends every one
    try:
        assert not opens_home(changed, sid_b, b)
        sid_c, _, cookie_c = login(changed, OTHER_TOKEN)
        assert opens_home(changed, sid_c, session_of(cookie_c))
    finally:
        changed.close()


def test_a_session_expires_after_session_hours(index: Path, tmp_path: Path) -> None:
    server = Server(index, tmp_path / "data", "--token", TOKEN, "--session-hours", "0.002")  # 7.2 s
    try:
        sid, _, cookie = login(server)
        assert re.search(r"(?i)max-age=7\b", cookie), cookie
        assert opens_home(server, sid, session_of(cookie))
        time.sleep(7.5)
        assert not opens_home(server, sid, session_of(cookie))
    finally:
        server.close()
    assert "--session-hours must be above 0" in _refused(index, tmp_path, "--session-hours", "0")


def _refused(index: Path, tmp_path: Path, *args: str) -> str:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["serve", "--corpus", str(index), "--data", str(tmp_path / "refused"), "--token", TOKEN, *args])
    assert code == 2 and not (tmp_path / "refused").exists()
    return err.getvalue()


def timed(call):
    t = time.monotonic()
    reply = call()
    return reply, time.monotonic() - t


def test_wrong_tokens_are_slowed_then_refused_per_address(index: Path, tmp_path: Path) -> None:
    """5 wrong tokens are answered at once; the 6th waits 0.25 s, the 7th 0.5 s, the 8th 1 s
    (lower bounds only: a loaded machine is slower, never faster); at 20 in a minute every
    token check from the address is 429, the right token included, while a session opened
    before goes on. Requests without a token are not guesses and are never throttled."""
    server = Server(index, tmp_path / "data", "--token", TOKEN)
    bearer = {"authorization": f"Bearer {TOKEN}"}
    try:
        sid, _, cookie = login(server)  # a session from before the attack
        for _ in range(25):  # no token sent: 401, not counted
            assert server.request("GET", "/api/checks").status == 401
        sid2, csrf2 = login_form(server)
        for n in range(1, 9):
            reply, took = timed(lambda: post_login(server, "wrong-guess-0000000000", sid2, csrf2))
            assert reply.status == 401, (n, reply.status)
            if n > 5:
                assert took >= 0.25 * 2 ** (n - 6) * 0.9, f"attempt {n} took {took:.3f} s: not slowed"
        wrong = {"authorization": "Bearer wrong-guess-1111111111"}
        with ThreadPoolExecutor(12) as pool:  # side by side: each still counted, never past 20
            replies = list(pool.map(lambda _: server.request("GET", "/api/checks", headers=wrong), range(12)))
        assert sorted(r.status for r in replies) == [401] * 12
        blocked = server.request("GET", "/api/checks", headers=bearer)  # the 21st check: the right token too
        assert blocked.status == 429 and 1 <= int(blocked.headers["retry-after"]) <= 60, blocked.text
        assert "too many wrong tokens" in blocked.json()["error"]
        page = post_login(server, TOKEN, sid2, csrf2)
        assert page.status == 429 and page.headers["retry-after"]
        assert opens_home(server, sid, session_of(cookie))  # a session is no token check
    finally:
        server.close()
    log = server.log.read_text()
    lines = [line for line in log.splitlines() if "failed logins or bearer tokens from 127.0.0.1" in line]
    assert len(lines) == 2 and "delayed" in lines[0] and "refused (429)" in lines[1], log[-2000:]
    assert TOKEN not in log and "wrong-guess" not in log
