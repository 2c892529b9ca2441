"""One place that turns every error into ``{"error": {...}}`` with the contract's status code."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from app import exceptions as exc
from app.jsontext import IntegerTooLong, loads
from app.paths import pointer_from_parts

__all__ = [
    "FORBIDDEN_RESPONSE",
    "PANEL_TARGETS",
    "STATUS",
    "ErrorOut",
    "error_response",
    "install_error_handlers",
    "size_in_kb",
]

log = logging.getLogger(__name__)

STATUS: dict[type[exc.MaskscopeError], int] = {
    exc.GrammarError: 422,
    exc.GrammarTooComplex: 422,
    exc.GrammarTooSlow: 422,
    exc.SandboxUnconfined: 422,
    exc.InvalidInput: 422,
    exc.NoForwardEngine: 422,
    exc.ForbiddenOrigin: 403,
    exc.TokenRefused: 409,
    exc.SessionFinished: 409,
    exc.RunInProgress: 409,
    exc.ModelNotConfigured: 409,
    exc.SessionNotFound: 404,
    exc.PermalinkNotFound: 404,
    exc.TooLarge: 413,
    exc.SessionGone: 410,
    exc.WrongReplica: 421,
    exc.CapacityExceeded: 429,
    exc.RateLimited: 429,
    exc.CutShortByLoad: 503,
    exc.NotReady: 503,
    exc.ShuttingDown: 503,
    exc.ModelLoadError: 503,
    exc.StoreUnavailable: 503,
    exc.RemoteEngineError: 502,
    exc.EngineUnreachable: 502,
    exc.EngineError: 502,
    exc.EngineTimeout: 504,
    exc.RequestEnded: 499,  # nginx's "client closed request": nobody reads it
}


class ErrorDetail(BaseModel):
    """The ``error`` object of every error answer."""

    message: str
    code: str
    line: int | None = None
    column: int | None = None
    pointer: str | None = None


class ErrorOut(BaseModel):
    """Every error answer: ``{"error": {"message", "code", "line"?, "column"?, "pointer"?}}``."""

    error: ErrorDetail


#: The OpenAPI entry of the 403 any route may answer (app/web/middleware/security.py).
FORBIDDEN_RESPONSE: dict[int | str, dict[str, Any]] = {
    403: {
        "model": ErrorOut,
        "description": "`forbidden_origin`: a Host outside MASKSCOPE_ALLOWED_HOSTS, a "
        "state-changing request from another origin, or a page request without its CSRF token",
    }
}
_HTTP_CODES = {400: "malformed", 404: "not_found", 405: "method_not_allowed", 413: "too_large"}


def status_of(error: exc.MaskscopeError) -> int:
    """The HTTP status of an engine error."""
    for cls in type(error).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


#: The page's panels (the id htmx sends as ``HX-Target``) and the class of the element a 4xx
#: answer replaces, so that the error shows where the user looks; None: the panel's content is
#: replaced, the panel kept. Any other target (a step, a force) gets the toast.
PANEL_TARGETS: dict[str, str | None] = {
    "compile-result": "compile",
    "doctor-result": "doctor",
    "replay-result": "replay-result",
    "inspector": "inspector panel",
    "tests-result": None,
}


def error_response(request: Request, status: int, body: dict[str, Any]) -> Response:
    """JSON for the API; for the page's HTMX requests, a fragment: a 4xx of a panel's request in
    that panel (``PANEL_TARGETS``), anything else in the toast."""
    if request.headers.get("HX-Request") != "true":
        return JSONResponse({"error": body}, status_code=status)
    templates = request.app.state.maskscope.templates
    target = request.headers.get("HX-Target") or ""
    if 400 <= status < 500 and target in PANEL_TARGETS:
        panel_class = PANEL_TARGETS[target]
        context = {"error": body, "panel_id": target, "panel_class": panel_class}
        response: Response = templates.TemplateResponse(
            request, "partials/_panel_error.html", context, status_code=status
        )
        response.headers["HX-Retarget"] = f"#{target}"
        response.headers["HX-Reswap"] = "innerHTML" if panel_class is None else "outerHTML"
        return response
    response = templates.TemplateResponse(
        request, "partials/_error.html", {"error": body}, status_code=status
    )
    response.headers["HX-Retarget"] = "#toast"
    response.headers["HX-Reswap"] = "innerHTML"
    return response


def _pointer(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return pointer_from_parts(parts)


def size_in_kb(size: int) -> str:
    """A size in KB (a character counted as a byte, as the caps are), or in characters."""
    return f"{size / 1024:,.0f} KB" if size >= 1024 else f"{size:,} characters"


def _too_long(problem: dict[str, Any], pointer: str) -> str | None:
    """A text over its limit, in plain words with the limit in KB: "the source is 464 KB: over
    the 256 KB limit (262,144 characters)"; None for any other problem."""
    limit = (problem.get("ctx") or {}).get("max_length")
    given = problem.get("input")
    if problem.get("type") not in ("string_too_long", "too_long") or not isinstance(limit, int):
        return None
    name = pointer.rsplit("/", 1)[-1] if pointer else "the text"
    what = f"the {name.replace('_', ' ')}" if name.isidentifier() else f"{pointer}"
    if not isinstance(given, str):
        return None  # a list's length: its own message says it
    size = f" is {size_in_kb(len(given))}:"
    return f"{what}{size} over the {size_in_kb(limit)} limit ({limit:,} characters)"


async def _maskscope_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, exc.MaskscopeError)
    response = error_response(request, status_of(error), error.to_dict())
    if isinstance(error, exc.RateLimited):
        response.headers["Retry-After"] = str(error.retry_after_s)
    return response


async def _validation_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, RequestValidationError)
    problems: list[dict[str, Any]] = [dict(p) for p in error.errors()]
    first: dict[str, Any] = problems[0] if problems else {"msg": "invalid request", "loc": ()}
    if first.get("type") == "json_invalid":
        context = first.get("ctx") or {}
        message = f"malformed JSON: {context.get('error', first['msg'])}"
        return error_response(request, 400, {"message": message, "code": "malformed"})
    pointer = _pointer(tuple(first.get("loc", ())))
    message = _too_long(first, pointer) or f"{pointer or '/'}: {first['msg']}"
    if len(problems) > 1:
        message += f" (and {len(problems) - 1} more)"
    return error_response(
        request, 422, {"message": message, "code": "invalid_request", "pointer": pointer}
    )


async def _unreadable_body(request: Request, cause: BaseException | None) -> dict[str, Any] | None:
    """What kept FastAPI from reading a JSON body (its own answer names no cause): bytes that are
    not UTF-8, or an integer past Python's limit, by its pointer, line and column."""
    if isinstance(cause, UnicodeDecodeError):
        byte = cause.object[cause.start]
        message = f"malformed JSON: the body is not UTF-8 (byte {byte:#04x} at {cause.start})"
        return {"message": message, "code": "malformed"}
    if not isinstance(cause, ValueError):
        return None
    try:  # the route read it: the body is kept on the request
        loads((await request.body()).decode("utf-8"))
    except IntegerTooLong as too_long:
        return {"message": f"malformed JSON: {too_long.msg}", "code": "malformed",
                **too_long.where()}  # fmt: skip
    except (RuntimeError, ValueError, RecursionError):  # the stream is gone, or another fault
        pass
    return None


async def _http_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, StarletteHTTPException)
    if error.status_code == 400 and (body := await _unreadable_body(request, error.__cause__)):
        return error_response(request, 400, body)
    code = _HTTP_CODES.get(error.status_code, "http_error")
    return error_response(request, error.status_code, {"message": str(error.detail), "code": code})


async def _unexpected(request: Request, error: Exception) -> Response:
    request_id = getattr(request.state, "request_id", "-")
    log.exception("%s unexpected error on %s %s", request_id, request.method, request.url.path)
    return error_response(
        request, 500, {"message": "internal error (a bug: please report it)", "code": "internal"}
    )


def install_error_handlers(app: FastAPI) -> None:
    """Route every error, FastAPI's own validation errors included, through one shape."""
    app.add_exception_handler(exc.MaskscopeError, _maskscope_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)


def not_found_page(request: Request, message: str) -> HTMLResponse:
    """A friendly 404 page."""
    templates = request.app.state.maskscope.templates
    response: HTMLResponse = templates.TemplateResponse(
        request, "pages/not_found.html", {"message": message}, status_code=404
    )
    return response
