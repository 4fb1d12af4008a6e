"""The server's JSON API (handlers only; ``app.py`` wires them up, ``routes.py`` has the pages).

``POST /api/checks`` queues a check, ``GET /api/checks/{id}`` gives its status, progress and
result, ``GET /api/checks`` a page of checks newest first (``limit``, ``before``: see
``paging``), ``GET /api/status`` the server's state. The API takes JSON only (a cross-site
form cannot send it) and, with a token set, ``Authorization: Bearer``. Errors are
``{"error": "one line"}``.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sanctuary_local.serve import rendering
from sanctuary_local.serve.jobs import CheckRecord
from sanctuary_local.serve.paging import PagingError, history_page, paging_args
from sanctuary_local.serve.queue import QueueFull
from sanctuary_local.serve.routes import ClaimError, Context, client_of, ctx_of, parse_claim, result_of
from sanctuary_local.serve.throttle import Throttled

__all__ = ["api_create", "api_get", "api_list", "api_refusal", "api_status", "error"]


def error(status: int, message: str, **headers: str) -> JSONResponse:
    """``{"error": message}`` with ``status``."""
    return JSONResponse({"error": message}, status_code=status, headers=headers or None)


async def api_refusal(request: Request) -> JSONResponse | None:
    """None when the call may go on; else 401 (no or a wrong bearer token) or 429 (too many
    wrong ones from this address: ``throttle``)."""
    try:
        if await ctx_of(request).guard.bearer_ok(request.headers.get("authorization"), client_of(request)):
            return None
    except Throttled as exc:
        return error(429, str(exc), **{"retry-after": str(exc.retry_after)})
    return error(401, "missing or wrong bearer token (send 'Authorization: Bearer TOKEN')", **{"www-authenticate": "Bearer"})


def api_view(ctx: Context, rec: CheckRecord, with_result: bool = True) -> dict[str, Any]:
    result = result_of(ctx, rec)[0] if with_result else None
    active = rec.status in ("queued", "running")
    out = rendering.record_json(rec, position=ctx.queue.position(rec.id) if active else None,
                                eta_s=ctx.queue.eta_s(rec) if active else None, stages=ctx.queue.stages(), result=result)
    out["url"] = f"/api/checks/{rec.id}"
    out["page"] = f"/checks/{rec.id}"
    return out


async def api_create(request: Request) -> Response:
    if (refused := await api_refusal(request)) is not None:
        return refused
    if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
        return error(415, "send the check as JSON: Content-Type: application/json")
    try:
        body = orjson.loads(await request.body())
    except orjson.JSONDecodeError:
        return error(422, "the body is not valid JSON")
    if not isinstance(body, dict) or "claim" not in body:
        return error(422, "the body must be a JSON object with a 'claim' (and optionally a 'claim_date', YYYY-MM-DD)")
    ctx = ctx_of(request)
    try:
        claim, date = parse_claim(body["claim"], body.get("claim_date"))
        rec = ctx.queue.submit(claim, date)
    except ClaimError as exc:
        return error(422, str(exc))
    except QueueFull as exc:
        return error(429, str(exc), **{"retry-after": "30"})
    return JSONResponse({"id": rec.id, "status": rec.status, "url": f"/api/checks/{rec.id}", "page": f"/checks/{rec.id}"},
                        status_code=202, headers={"location": f"/api/checks/{rec.id}"})


async def api_get(request: Request) -> Response:
    if (refused := await api_refusal(request)) is not None:
        return refused
    ctx = ctx_of(request)
    rec = ctx.store.get(request.path_params["check_id"])
    if rec is None:
        return error(404, "no such check")
    return JSONResponse(api_view(ctx, rec))


async def api_list(request: Request) -> Response:
    """``GET /api/checks?limit=N&before=ID``: a page of checks, newest first (``paging``)."""
    if (refused := await api_refusal(request)) is not None:
        return refused
    ctx = ctx_of(request)
    try:
        before, limit = paging_args({k: request.query_params.getlist(k) for k in request.query_params}, api=True)
    except PagingError as exc:
        return error(400, str(exc))
    got = history_page(ctx.store, before, limit)
    return JSONResponse({"checks": [api_view(ctx, r, with_result=False) for r in got.checks], "total": got.total,
                         "limit": limit, "before": before,
                         "next": f"/api/checks?limit={limit}&before={got.older}" if got.older else None})


async def api_status(request: Request) -> Response:
    if (refused := await api_refusal(request)) is not None:
        return refused
    ctx = ctx_of(request)
    return JSONResponse({"state": ctx.queue.state, "problem": ctx.queue.problem, "waiting": len(ctx.queue.waiting()),
                         "max_queued": ctx.queue.max_queued, "running": ctx.queue.current.id if ctx.queue.current else None,
                         "corpus": ctx.corpus_name})
