"""The run stream: server-sent events, one per step, generated off the event loop."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import Request

from app.engine import StepRecord
from app.web.actions import step_response
from app.web.sessions import SessionHandle
from app.web.state import AppState

__all__ = ["run_events"]


async def run_events(
    request: Request,
    state: AppState,
    handle: SessionHandle,
    *,
    after: int,
    fmt: Literal["html", "json"],
) -> AsyncIterator[dict[str, Any]]:
    """Send the steps after index ``after``, then generate until done, paused or disconnected.

    A reconnect (``Last-Event-ID``) resumes from the last step the client saw: steps already
    generated are sent again from the session's record, never generated anew. A newer stream
    for the same session takes the run over; this one then ends.

    Events: ``step`` (SSE id = the step index), then ``done`` when the session has stopped or
    ``paused`` when a pause ended the run, then ``end``.
    """
    session = handle.session
    handle.run += 1
    run = handle.run
    handle.pause = False
    handle.streaming = True

    def step_event(record: StepRecord) -> dict[str, Any]:
        if fmt == "json":
            data = json.dumps(record.to_dict())
        else:
            data = state.render("partials/_chip.html", {"step": record, "with_bitmask": True})
        return {"event": "step", "id": str(record.index), "data": data}

    try:
        for record in list(session.steps[after + 1 :]):
            yield step_event(record)
        while not session.done and not handle.pause and handle.run == run:
            if await request.is_disconnected():
                return
            async with handle.lock:
                record = await asyncio.to_thread(session.step)
            state.sessions.enforce_memory(keep=handle)
            yield step_event(record)
        if handle.run != run:
            return
        answer = await step_response(state, handle, [])
        event = "done" if session.done else "paused"
        if fmt == "json":
            data = json.dumps({**answer, "paused": not session.done})
        else:
            data = state.render("partials/_status.html", {"state": answer, "handle": handle})
        yield {"event": event, "data": data}
        yield {"event": "end", "data": ""}
    finally:
        if handle.run == run:
            handle.streaming = False
            handle.pause = False
