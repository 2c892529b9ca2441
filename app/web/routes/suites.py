"""Suites over HTTP: ``POST /api/suites`` (a zip, a JSONL or a folder's files) checked in the
background, its progress on ``GET /api/suites/{id}/events``, its report on ``GET
/api/suites/{id}``. The page's Suite view is app/web/ui/suites.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import JSONResponse, Response
from sse_starlette import EventSourceResponse
from starlette.datastructures import UploadFile

from app.engine import PRESETS
from app.engine.stack_pins import MASKSCOPE
from app.exceptions import InvalidInput, TooLarge
from app.settings import Settings
from app.suite.discovery import Source
from app.web.errors import ErrorOut
from app.web.middleware.clients import current_client
from app.web.middleware.rootpath import url
from app.web.runtime.deps import StateDep
from app.web.runtime.state import AppState
from app.web.schemas.suites import SuiteCreatedOut
from app.web.services import suite_table, suite_upload, suites
from app.web.services.streams import SHUTDOWN_GRACE_S, Event

__all__ = ["router"]

router = APIRouter()

#: What a multipart form adds around its files (boundaries, headers): allowed above the cap.
_FORM_SLACK = 64 * 1024
_ZIP_TYPES = ("application/zip", "application/x-zip-compressed")
_JSONL_TYPES = ("application/x-ndjson", "application/jsonl", "application/x-jsonlines")
#: How often a waiting stream looks whether its client left.
_WATCH_S = 1.0
_ERRORS: dict[int | str, dict[str, Any]] = {
    413: {
        "model": ErrorOut,
        "description": "`too_large`: the upload, its files, unpacked "
        "bytes or sources past their caps",
    },
    422: {
        "model": ErrorOut,
        "description": "`invalid_input`: a path outside the suite (zip "
        "slip: absolute, `..`, a symbolic link), a zip that does not read, a bad JSONL line, "
        "no source, an unknown engine or preset",
    },
    429: {
        "model": ErrorOut,
        "description": "`capacity_exceeded`: too many suites being "
        "checked, on the server or for this client",
    },
}


def _runs(request: Request, state: AppState) -> suites.SuiteRuns:
    return suites.runs_of(state, request.app.state)


def _too_large(settings: Settings, size: int) -> TooLarge:
    return TooLarge(
        f"the upload is {size:,} bytes: over the {settings.suite_max_upload_bytes:,} a suite "
        "upload may be (MASKSCOPE_SUITE_MAX_UPLOAD_BYTES)",
        pointer="/file",
    )


async def _raw(request: Request, settings: Settings) -> bytes:
    """The body, its bytes counted as they arrive: refused past the cap."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > settings.suite_max_upload_bytes:
            raise _too_large(settings, size)
        chunks.append(chunk)
    return b"".join(chunks)


async def _uploads(
    request: Request, settings: Settings, name: str | None
) -> list[suite_upload.Upload]:
    """The uploaded files: a multipart form's ``file`` fields (the page), or a raw zip or
    JSONL body (API clients)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > settings.suite_max_upload_bytes + _FORM_SLACK:
        raise _too_large(settings, int(declared))
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media in _ZIP_TYPES:
        return [suite_upload.Upload(name or "suite.zip", await _raw(request, settings))]
    if media in _JSONL_TYPES:
        return [suite_upload.Upload(name or "suite.jsonl", await _raw(request, settings))]
    if media != "multipart/form-data":
        raise InvalidInput(
            "send the suite as multipart/form-data (file fields: a .zip, a .jsonl, or a "
            f"folder's files by their paths), or a raw {_ZIP_TYPES[0]} or {_JSONL_TYPES[0]} body",
            pointer="/file",
        )
    form = await request.form(max_files=settings.suite_max_files + 1, max_fields=16)
    files = [f for f in form.getlist("file") if isinstance(f, UploadFile)]
    uploads, size = [], 0
    for upload in files:
        data = await upload.read()
        size += len(data)
        if size > settings.suite_max_upload_bytes:
            raise _too_large(settings, size)
        uploads.append(suite_upload.Upload(upload.filename or "upload", data))
    return uploads


def _row(state: AppState, run: suites.SuiteRun, source: Source) -> str:
    """A source's table row, as the page renders it (a progress event carries it)."""
    cols = suite_table.columns(run.stacks, run.engines)
    listed = [{"name": source.name, "kind": source.kind}]
    row = suite_table.rows(run.report(), listed, cols)[0]
    return state.render(
        "partials/_suite_row.html", {"suite_id": run.id, "row": row, "columns": cols}
    )


@router.post(
    "/api/suites",
    tags=["suites"],
    status_code=202,
    response_model=SuiteCreatedOut,
    responses={
        200: {"description": "the same suite is already checked or being checked"},
        **_ERRORS,
    },
)
async def create_suite(
    request: Request,
    state: StateDep,
    stack: Annotated[
        list[str] | None, Query(description="repeatable; default maskscope (`GET /api/stacks`)")
    ] = None,
    engine: Annotated[list[str] | None, Query(description="repeatable; default xgrammar")] = None,
    preset: Annotated[str, Query(description="the compile options' preset")] = "maskscope",
    name: Annotated[str | None, Query(max_length=200, description="a raw body's file name")] = None,
) -> JSONResponse:
    """Check a suite: a multipart form's ``file`` fields (a ``.zip`` of a folder, a ``.jsonl``
    suite, or a folder's files named by their paths), or a raw ``application/zip`` or
    ``application/x-ndjson`` body. Its kinds are decided by the files' suffixes, as ``python -m
    app check`` decides them; it is checked in the background (202); equal sources, stacks,
    engines, options and model give an equal id, and a suite already kept or being checked is
    not checked again (200)."""
    stacks = tuple(dict.fromkeys(stack or [MASKSCOPE]))
    engines = tuple(dict.fromkeys(engine or ["xgrammar"]))
    suite_upload.check_stacks(stacks, state.settings)
    suite_upload.check_choices(engines, preset, tuple(PRESETS))
    uploads = await _uploads(request, state.settings, name)
    sources = await asyncio.to_thread(suite_upload.read_upload, uploads, state.settings)
    local = state.require_engine()
    options = suite_upload.options_for(preset)
    identity = local.model.identity.to_dict()
    suite_id = suite_upload.suite_id(sources, stacks, engines, options, identity)
    body = {"id": suite_id, "url": url(f"/suites/{suite_id}")}
    runs = _runs(request, state)
    kept = await asyncio.to_thread(state.store.get_suite, suite_id)
    # Looked at after the store's answer: nothing awaits between this and the run's start.
    if kept is not None or runs.get(suite_id) is not None:
        return JSONResponse(body, status_code=200)
    client = current_client()
    runs.admit(client)
    run = suites.SuiteRun(suite_id, client, sources, stacks, engines, options)
    suites.start(state, runs, run, lambda r, s: _row(state, r, s))
    return JSONResponse(body, status_code=202)


@router.get(
    "/api/suites/{suite_id}",
    tags=["suites"],
    responses={404: {"model": ErrorOut, "description": "`permalink_not_found`"}},
)
async def get_suite(request: Request, state: StateDep, suite_id: str) -> dict[str, Any]:
    """The suite's report: the JSON report ``python -m app check --format json`` writes
    (``version``, ``fail_on``, ``summary``, ``cases``), with the suite's ``id``, ``status``
    (``running``, ``done`` or ``cut_short``), ``done`` and ``total`` sources, the ``unchecked``
    ones, whether the store ``kept`` it, and its ``error`` (null when none). While it runs, the
    cases so far."""
    found = await suites.found(state, _runs(request, state), suite_id)
    report = found.pop("report")
    found.pop("sources")
    return {**report, **found}


async def _events(
    run: suites.SuiteRun, after: int, disconnected: Callable[[], Awaitable[bool]]
) -> AsyncIterator[Event]:
    """The run's events after index ``after``, as they come, until ``end``."""
    seen = after + 1
    while True:
        while seen < len(run.events):
            name, data = run.events[seen]
            yield {"event": name, "data": json.dumps(data), "id": str(seen)}
            seen += 1
            if name == "end":
                return
        if await disconnected():
            return
        await run.wait(seen, _WATCH_S)


async def _kept_end(found: dict[str, Any]) -> AsyncIterator[Event]:
    report = found["report"]
    data = {
        "done": found["total"],
        "total": found["total"],
        "summary": report["summary"],
        "unchecked": [],
        "cut_short": False,
        "kept": True,
        "error": None,
    }
    yield {"event": "end", "data": json.dumps(data), "id": "end"}


@router.get(
    "/api/suites/{suite_id}/events",
    tags=["suites"],
    responses={404: {"model": ErrorOut, "description": "`permalink_not_found`"}},
)
async def suite_events(
    request: Request,
    state: StateDep,
    suite_id: str,
    last_event_id: Annotated[str | None, Header(max_length=16)] = None,
) -> Response:
    """The suite's progress as server-sent events: ``progress`` for each source checked
    (``{"done", "total", "source", "row"}``, ``row`` its table row's HTML), then ``end``
    (``{"done", "total", "summary", "unchecked", "cut_short", "kept", "error"}``). A suite
    already kept sends ``end`` at once; a reconnect with ``Last-Event-ID`` resumes after it."""
    run = _runs(request, state).get(suite_id)
    if run is None:
        stream = _kept_end(await suites.found(state, _runs(request, state), suite_id))
    else:
        after = int(last_event_id) if last_event_id and last_event_id.isdigit() else -1
        stream = _events(run, after, request.is_disconnected)
    return EventSourceResponse(
        stream, ping=15, shutdown_event=anyio.Event(), shutdown_grace_period=SHUTDOWN_GRACE_S
    )
