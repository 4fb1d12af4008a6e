"""The server's pages (handlers only; ``app.py`` wires them up, ``api.py`` has the JSON API).

Pages: ``/`` (claim form, queue, history: ``HISTORY_ROWS`` checks a page, ``?before=ID``
for older ones, see ``paging``), ``/checks/{id}`` (progress with a meta refresh
while the check runs, then the result), ``/checks/{id}/evidence/{n}`` (a snippet's whole
source text with its span highlighted), ``/checks/{id}/download`` (``predictions.json``),
``/files/{path}`` (a corpus file as it is), ``/login``. Forms carry a CSRF token. How a
claim is read (the page and the API alike): at most ``MAX_CLAIM_CHARS`` characters (422 above); one
made only of whitespace and invisible format characters (zero-width spaces, bidi marks:
category Cf) is empty, one with a control character other than a line break or a tab
(NUL, ESC...: category Cc) is refused too, and so is one with no visible letter or digit once
the default-ignorable code points (``DEFAULT_IGNORABLE``: the Hangul fillers U+3164...,
variation selectors) and the combining marks are left out (422 each).
"""

from __future__ import annotations

import datetime as dt
import re
import secrets
import unicodedata
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from sanctuary_local.errors import UserError
from sanctuary_local.serve import rendering
from sanctuary_local.serve.jobs import CheckRecord, CheckStore
from sanctuary_local.serve.paging import HISTORY_ROWS, PagingError, history_page, paging_args
from sanctuary_local.serve.queue import CheckQueue, QueueFull
from sanctuary_local.serve.security import FILE_CSP, SESSION_COOKIE, SID_COOKIE, Guard, IndexedFiles, corpus_file
from sanctuary_local.serve.throttle import Throttled

__all__ = ["DEFAULT_IGNORABLE", "MAX_CLAIM_CHARS", "ClaimError", "Context", "client_of", "ctx_of", "page", "parse_claim",
           "posted_form", "result_of"]

#: Longest claim accepted, in characters.
MAX_CLAIM_CHARS = 2000
#: Seconds between two refreshes of a check's page while it runs; a waiting check's page adds
#: ``REFRESH_PER_PLACE`` per check before it in the queue, up to ``REFRESH_MAX_S``.
REFRESH_S, REFRESH_PER_PLACE, REFRESH_MAX_S = 2, 3, 30


def refresh_s(status: str, position: int | None, off: bool) -> int | None:
    """Seconds to the next automatic reload of a check's page; None when it is finished or the
    analyst turned reloading off (``?refresh=off``: a screen reader re-reads a reloaded page)."""
    if off or status not in ("queued", "running"):
        return None
    return REFRESH_S if status == "running" else min(REFRESH_MAX_S, REFRESH_S + REFRESH_PER_PLACE * (position or 0))
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
#: Unicode's Default_Ignorable_Code_Point ranges (DerivedCoreProperties.txt, Unicode 15.1):
#: drawn as nothing, some of them letters (U+3164 HANGUL FILLER is category Lo).
DEFAULT_IGNORABLE = ((0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160), (0x17B4, 0x17B5),
                     (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x206F), (0x3164, 0x3164),
                     (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3),
                     (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF))
NO_VISIBLE = ("the claim has no visible letter or digit (invisible characters such as U+3164 HANGUL FILLER and "
              "combining marks on their own do not count)")


def _visible(c: str) -> bool:
    """A letter or digit that is drawn: not default-ignorable, not a combining mark."""
    code = ord(c)
    return unicodedata.category(c)[0] in "LN" and not any(lo <= code <= hi for lo, hi in DEFAULT_IGNORABLE)


#: What corpus files are sent as; anything else is a download.
_TYPES = {".pdf": "application/pdf", ".txt": "text/plain; charset=utf-8", ".md": "text/plain; charset=utf-8",
          ".html": "text/html; charset=utf-8", ".htm": "text/html; charset=utf-8", ".json": "application/json"}


class ClaimError(ValueError):
    """A claim or claim date the server will not check (answered 422 with the message)."""


@dataclass
class Context:
    """Everything a handler needs: the store, the queue, the guard, the corpus."""

    store: CheckStore
    queue: CheckQueue
    guard: Guard
    corpus: Path
    """The corpus index folder."""
    corpus_root: Path
    """The folder the index was built from (its files are served from there)."""
    indexed: IndexedFiles
    """The live index's files, by their paths relative to ``corpus_root`` (``path in indexed``)."""
    corpus_name: str


def parse_claim(claim: Any, claim_date: Any) -> tuple[str, str | None]:
    """A claim and its optional date (``YYYY-MM-DD``) as the server stores them, or ``ClaimError``."""
    if not isinstance(claim, str):
        raise ClaimError("'claim' must be a string")
    claim = claim.replace("\r\n", "\n").replace("\r", "\n").strip()  # a form sends CRLF; its maxlength counts one
    if all(c.isspace() or unicodedata.category(c) == "Cf" for c in claim):  # "", or only invisible characters
        raise ClaimError("the claim is empty")
    if (bad := next((c for c in claim if unicodedata.category(c) == "Cc" and c not in "\n\t"), None)) is not None:
        raise ClaimError(f"the claim contains a control character (U+{ord(bad):04X} at character "
                         f"{claim.index(bad) + 1:,}); only line breaks and tabs are allowed")
    if len(claim) > MAX_CLAIM_CHARS:
        raise ClaimError(f"the claim has {len(claim):,} characters; at most {MAX_CLAIM_CHARS:,} are allowed")
    if not any(map(_visible, claim)):  # only fillers, combining marks, symbols: nothing to check
        raise ClaimError(NO_VISIBLE)
    if claim_date in (None, ""):
        return claim, None
    if not isinstance(claim_date, str) or not _DATE.fullmatch(claim_date):
        raise ClaimError("'claim_date' must be a date written YYYY-MM-DD")
    try:
        dt.date.fromisoformat(claim_date)
    except ValueError:
        raise ClaimError(f"'claim_date' {claim_date!r} is not a valid date") from None
    return claim, claim_date


def ctx_of(request: Request) -> Context:
    return request.app.state.ctx


def client_of(request: Request) -> str:
    """The client's address, against which failed token checks are counted (``throttle``)."""
    return request.client.host if request.client else "unknown"


def throttled_page(request: Request, exc: Throttled) -> HTMLResponse:
    resp = page(request, "serve_login.html", status=429, error=str(exc))
    resp.headers["retry-after"] = str(exc.retry_after)
    return resp


# ---------------------------------------------------------------------- pages
def _sid(request: Request) -> tuple[str, bool]:
    """This browser's CSRF cookie, and whether it is new (then the response sets it)."""
    sid = request.cookies.get(SID_COOKIE, "")
    return (sid, False) if re.fullmatch(r"[A-Za-z0-9_-]{20,64}", sid) else (secrets.token_urlsafe(24), True)


def page(request: Request, template: str, status: int = 200, **values: Any) -> HTMLResponse:
    """A page from ``template``, with the CSRF token of this browser for its forms."""
    ctx = ctx_of(request)
    sid, new = _sid(request)
    values.setdefault("refresh", None)
    body = rendering.templates().get_template(template).render(
        csrf=ctx.guard.csrf_for(sid), corpus_name=ctx.corpus_name, login=ctx.guard.required,
        server_state=ctx.queue.state, server_problem=ctx.queue.problem, **values)
    resp = HTMLResponse(body, status_code=status)
    if new:
        resp.set_cookie(SID_COOKIE, sid, httponly=True, samesite="strict", path="/")
    return resp


def _logged_in(request: Request) -> bool:
    return ctx_of(request).guard.cookie_ok(dict(request.cookies))


def _to_login() -> RedirectResponse:
    return RedirectResponse("/login", status_code=303)


async def _form(request: Request) -> dict[str, str]:
    """A urlencoded form's fields (the body is already capped by the security middleware)."""
    raw = (await request.body()).decode("utf-8", "replace")
    return {k: v[0] for k, v in urllib.parse.parse_qs(raw, keep_blank_values=True).items()}


def _csrf_ok(request: Request, form: dict[str, str]) -> bool:
    return ctx_of(request).guard.csrf_ok(request.cookies.get(SID_COOKIE), form.get("csrf"))


def _csrf_refused() -> HTMLResponse:
    return HTMLResponse("<!DOCTYPE html><title>Refused</title><p>This form was not sent from this server's own page "
                        "(missing or wrong CSRF token). Reload the page and try again.</p>", status_code=403)


def _home_values(ctx: Context, before: str | None = None) -> dict[str, Any]:
    running = ctx.queue.current
    waiting = [r for r in (ctx.store.get(i) for i in ctx.queue.waiting()) if r is not None]
    return {"running": running, "waiting": waiting, "history": history_page(ctx.store, before, HISTORY_ROWS),
            "eta": ctx.queue.eta_s, "stages": ctx.queue.stages(), "rows": rendering.stage_rows}


async def home(request: Request) -> Response:
    """``/``, or ``/?before=ID``: the history from the checks older than ``ID`` on (``paging``)."""
    if not _logged_in(request):
        return _to_login()
    try:
        before, _ = paging_args({k: request.query_params.getlist(k) for k in request.query_params}, api=False)
    except PagingError as exc:
        return page(request, "serve_refused.html", status=400, message=str(exc))
    return page(request, "serve_home.html", form_error="", claim="", claim_date="",
                **_home_values(ctx_of(request), before))


async def form_url(request: Request) -> Response:
    """``GET /checks``: the URL a refused form was answered at, reloaded or revisited: the home page."""
    return RedirectResponse("/", status_code=303)


async def posted_form(request: Request) -> tuple[Any, Response | None]:
    """A page's POSTed form when the browser is logged in and sent the form's CSRF token;
    else (None, the answer refusing it)."""
    if not _logged_in(request):
        return None, _to_login()
    form = await _form(request)
    if not _csrf_ok(request, form):
        return None, _csrf_refused()
    return form, None


async def submit_form(request: Request) -> Response:
    form, refused = await posted_form(request)
    if refused is not None:
        return refused
    ctx = ctx_of(request)
    try:
        claim, date = parse_claim(form.get("claim", ""), form.get("claim_date") or None)
        rec = ctx.queue.submit(claim, date)
    except (ClaimError, QueueFull) as exc:
        status = 429 if isinstance(exc, QueueFull) else 422
        return page(request, "serve_home.html", status=status, form_error=str(exc), claim=form.get("claim", ""),
                    claim_date=form.get("claim_date", ""), **_home_values(ctx))
    return RedirectResponse(f"/checks/{rec.id}", status_code=303)


def result_of(ctx: Context, rec: CheckRecord) -> tuple[rendering.CheckResult | None, str]:
    if rec.status != "done":
        return None, ""
    try:
        return rendering.load_result(ctx.store.run_dir(rec.id), ctx.corpus, ctx.indexed, rec.id), ""
    except UserError as exc:
        return None, str(exc)


async def check_page(request: Request) -> Response:
    if not _logged_in(request):
        return _to_login()
    ctx = ctx_of(request)
    rec = ctx.store.get(request.path_params["check_id"])
    if rec is None:
        return page(request, "serve_missing.html", status=404, what="check")
    result, problem = result_of(ctx, rec)
    position, off = ctx.queue.position(rec.id), request.query_params.get("refresh") == "off"
    return page(request, "serve_check.html", rec=rec, result=result, result_problem=problem,
                position=position, eta=ctx.queue.eta_s(rec) if rec.status in ("queued", "running") else None,
                stage_rows=rendering.stage_rows(rec, ctx.queue.stages()), refresh=refresh_s(rec.status, position, off),
                refresh_off=off)


async def evidence_page(request: Request) -> Response:
    if not _logged_in(request):
        return _to_login()
    ctx = ctx_of(request)
    rec = ctx.store.get(request.path_params["check_id"])
    result, _ = result_of(ctx, rec) if rec is not None else (None, "")
    n = request.path_params["n"]
    if rec is None or result is None or not 1 <= n <= len(result.evidence):
        return page(request, "serve_missing.html", status=404, what="evidence snippet")
    view = result.evidence[n - 1]
    text = _unit_text(ctx.corpus, view.unit)
    body, found = rendering.source_html(text, view.start, view.end, view.text)
    return page(request, "serve_source.html", rec=rec, view=view, body=body, found=found and bool(text))


def _unit_text(corpus: Path, unit: int | None) -> str:
    """The extracted text of a corpus unit ("" when the index cannot give it)."""
    from sanctuary_local.corpus.index import CorpusIndex

    try:
        index = CorpusIndex(corpus)
        return index.unit_text(unit) if unit is not None and 0 <= unit < index.n_units else ""
    except (UserError, OSError):
        return ""


async def download(request: Request) -> Response:
    if not _logged_in(request):
        try:
            if not await ctx_of(request).guard.bearer_ok(request.headers.get("authorization"), client_of(request)):
                return _to_login()
        except Throttled as exc:
            return throttled_page(request, exc)
    ctx = ctx_of(request)
    rec = ctx.store.get(request.path_params["check_id"])
    path = ctx.store.predictions_path(rec.id) if rec is not None and rec.status == "done" else None
    if path is None or not path.is_file():
        return page(request, "serve_missing.html", status=404, what="result")
    return Response(path.read_bytes(), media_type="application/json",
                    headers={"content-disposition": f'attachment; filename="check-{rec.id}.json"'})


async def corpus_file_route(request: Request) -> Response:
    """A corpus file as it is, sandboxed (no script, no origin); 404 for any path that is not
    an indexed file inside the corpus root."""
    if not _logged_in(request):
        return _to_login()
    ctx = ctx_of(request)
    target = corpus_file(ctx.corpus_root, request.path_params["path"], ctx.indexed)
    if target is None:
        return page(request, "serve_missing.html", status=404, what="file")
    kind = _TYPES.get(target.suffix.lower())
    headers = {"content-security-policy": FILE_CSP}
    if kind is None:
        kind = "application/octet-stream"
        headers["content-disposition"] = "attachment"
    return Response(target.read_bytes(), media_type=kind, headers=headers)


async def stylesheet(request: Request) -> Response:
    return Response(rendering.stylesheet(), media_type="text/css", headers={"cache-control": "max-age=3600"})


async def login(request: Request) -> Response:
    guard = ctx_of(request).guard
    if not guard.required:
        return RedirectResponse("/", status_code=303)
    if request.method == "GET":
        return page(request, "serve_login.html", error="")
    form = await _form(request)
    if not _csrf_ok(request, form):
        return _csrf_refused()
    try:
        if not await guard.token_ok(form.get("token", ""), client_of(request)):
            return page(request, "serve_login.html", status=401, error="wrong token")
    except Throttled as exc:
        return throttled_page(request, exc)
    sessions = guard.sessions
    resp = RedirectResponse("/", status_code=303)
    if sessions is not None:  # always, with a token set
        resp.set_cookie(SESSION_COOKIE, sessions.start(), max_age=sessions.max_age, httponly=True,
                        samesite="strict", path="/")
    return resp


async def logout(request: Request) -> Response:
    """Ends this browser's session on the server (the cookie alone would be kept by a copy)."""
    form = await _form(request)
    if not _csrf_ok(request, form):
        return _csrf_refused()
    guard = ctx_of(request).guard
    if guard.sessions is not None:
        guard.sessions.end(request.cookies.get(SESSION_COOKIE, ""))
    resp = RedirectResponse("/login" if guard.required else "/", status_code=303)
    resp.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
    return resp
