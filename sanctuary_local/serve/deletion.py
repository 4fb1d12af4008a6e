"""Deleting a check, from its page and from the API (``queue.cancel_check`` does the work).

Page: the check's **Delete** (or **Cancel and delete**) button posts ``/checks/{id}/delete``
with the page's CSRF token; without ``confirm=yes`` the answer is a confirmation page whose
own form sends it (no script: the pages have none). API: ``DELETE /api/checks/{id}``, with
the bearer token when one is set: 200 ``{"id", "status": "deleted"}`` when the check is gone
(a finished, failed or waiting one), 202 ``{"id", "status": "cancelling"}`` when it runs (it
stops at its next stop point and is then deleted), 404 when there is no such check. A
cross-site page cannot send DELETE without a CORS preflight, which the server never grants.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sanctuary_local.errors import UserError
from sanctuary_local.serve.queue import cancel_check
from sanctuary_local.serve.api import api_refusal, error
from sanctuary_local.serve.routes import ctx_of, page, posted_form

__all__ = ["api_delete", "delete_form"]


async def delete_form(request: Request) -> Response:
    """``POST /checks/{id}/delete``: the confirmation page, then (``confirm=yes``) the deletion."""
    form, refused = await posted_form(request)
    if refused is not None:
        return refused
    ctx = ctx_of(request)
    rec = ctx.store.get(request.path_params["check_id"])
    if rec is None:
        return page(request, "serve_missing.html", status=404, what="check")
    if form.get("confirm") != "yes":
        return page(request, "serve_delete.html", rec=rec, outcome=None, problem="")
    try:
        outcome = cancel_check(ctx.queue, rec.id)
    except (UserError, OSError) as exc:
        return page(request, "serve_delete.html", status=409, rec=rec, outcome=None, problem=str(exc))
    if outcome is None:
        return page(request, "serve_missing.html", status=404, what="check")
    return page(request, "serve_delete.html", rec=rec, outcome=outcome, problem="")


async def api_delete(request: Request) -> Response:
    """``DELETE /api/checks/{id}`` (see the module docstring)."""
    if (refused := await api_refusal(request)) is not None:
        return refused
    check_id = request.path_params["check_id"]
    try:
        outcome = cancel_check(ctx_of(request).queue, check_id)
    except (UserError, OSError) as exc:
        return error(409, f"cannot delete check {check_id}: {exc}")
    if outcome is None:
        return error(404, "no such check")
    return JSONResponse({"id": check_id, "status": outcome}, status_code=200 if outcome == "deleted" else 202)
