"""Sessions: open one, step it, go back, force a token, run it as a stream, download its trace."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import anyio
from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import Response
from sse_starlette import EventSourceResponse

from app.caps import MAX_TOKENS
from app.web.routes.encoding import json_response
from app.web.runtime.deps import HandleDep, StateDep
from app.web.schemas.bodies import CountIn, ForceIn, SessionIn
from app.web.services import actions
from app.web.services.instruments import path_rows
from app.web.services.streams import END_ID, SHUTDOWN_GRACE_S, run_events

__all__ = ["router"]

router = APIRouter()


@router.post("/api/sessions", tags=["sessions"])
async def create_session(body: SessionIn, state: StateDep) -> dict[str, Any]:
    """Open a session on the model ``model`` names: compile, render the prompt, ready to step."""
    handle = await actions.create_session(state, body)
    return actions.session_answer(handle)


@router.get("/api/sessions/{session_id}", tags=["sessions"])
async def get_session(handle: HandleDep, state: StateDep) -> Response:
    """All steps so far."""
    return await json_response(
        await actions.step_response(state, handle, list(handle.session.steps))
    )


@router.post("/api/sessions/{session_id}/step", tags=["sessions"])
async def step(handle: HandleDep, state: StateDep, body: CountIn | None = None) -> Response:
    """Take ``n`` steps (409 if the session has stopped; 422 ``grammar_too_slow`` for a step
    past ``MASKSCOPE_WALK_BUDGET_S``, which leaves no trace: the steps before it are kept)."""
    steps = await actions.step(state, handle, (body or CountIn()).n)
    return await json_response(await actions.step_response(state, handle, steps))


@router.post("/api/sessions/{session_id}/back", tags=["sessions"])
async def back(handle: HandleDep, state: StateDep, body: CountIn | None = None) -> dict[str, Any]:
    """Undo ``n`` steps."""
    await actions.back(state, handle, (body or CountIn()).n)
    return await actions.step_response(state, handle, [])


@router.post("/api/sessions/{session_id}/force", tags=["sessions"])
async def force(handle: HandleDep, state: StateDep, body: ForceIn) -> dict[str, Any]:
    """Force a token (409 with the reason when the mask blocks it; nothing changes then)."""
    record = await actions.force(state, handle, body.token_id, body.at)
    return await actions.step_response(state, handle, [record])


@router.post("/api/sessions/{session_id}/pause", tags=["sessions"])
async def pause(handle: HandleDep, state: StateDep) -> dict[str, Any]:
    """Stop a streaming run after the step in flight (which is still sent)."""
    handle.runs.pause()
    return await actions.step_response(state, handle, [])


@router.get(
    "/api/sessions/{session_id}/events",
    tags=["sessions"],
    responses={204: {"description": "a reconnect after `end`: the run is over, nothing starts"}},
)
async def events(
    request: Request,
    handle: HandleDep,
    state: StateDep,
    fmt: Annotated[Literal["html", "json"], Query(alias="format")] = "html",
    after: Annotated[
        int, Query(ge=-1, le=MAX_TOKENS, description="send steps after this index")
    ] = -1,
    last_event_id: Annotated[str | None, Header(max_length=16)] = None,
) -> Response:
    """Run the session, streaming each step as a server-sent event.

    ``step`` events carry the step's HTML fragment (with the packed bitmask in ``data-bitmask``)
    or, with ``format=json``, its record; then ``done`` or ``paused``, then ``end`` (SSE id
    ``end``). A reconnect with ``Last-Event-ID`` resumes after that step with every index sent
    exactly once, and never restarts a run that is over; a reconnect after ``end`` gets 204.
    A step that fails (past ``MASKSCOPE_WALK_BUDGET_S``: ``grammar_too_slow``) ends the run
    with ``error`` (``{"error": {"code", "message"}}``), then ``end``.
    """
    if last_event_id == END_ID:
        return Response(status_code=204)
    resume = last_event_id is not None and last_event_id.isdigit()
    if resume:
        after = int(str(last_event_id))
    stream = run_events(request.is_disconnected, state, handle, after=after, fmt=fmt, resume=resume)
    # sse-starlette sees uvicorn stop too: it waits for the stream's own shutdown event first.
    return EventSourceResponse(
        stream, ping=15, shutdown_event=anyio.Event(), shutdown_grace_period=SHUTDOWN_GRACE_S
    )


@router.get("/api/sessions/{session_id}/trace", tags=["sessions"])
async def trace(handle: HandleDep, state: StateDep) -> Response:
    """The whole trace as a JSON download: request, model identity, every step record."""
    answer = await actions.step_response(state, handle, list(handle.session.steps))
    body = {"request": handle.request, "model": handle.session.model.identity.to_dict(), **answer}
    body["by_path"] = path_rows(handle)  # where the mask fought the model, per path
    headers = {"Content-Disposition": f'attachment; filename="maskscope-trace-{handle.id}.json"'}
    return await json_response(body, headers=headers)
