"""The debugger's instruments on a live session: passing a break, the shadow continuation, the
steps added up by path."""

from __future__ import annotations

import threading
from typing import Any

from app.engine.stepper.by_path import by_path
from app.engine.stepper.shadow import ShadowResult, shadow
from app.web.runtime.sessions import SessionHandle
from app.web.runtime.state import AppState
from app.web.schemas.instruments import ShadowIn
from app.web.services.actions import step_response

__all__ = ["path_rows", "resume", "run_shadow"]


async def resume(state: AppState, handle: SessionHandle) -> dict[str, Any]:
    """Pass the break at the last step (the next run never stops on it there again): the step
    response, with ``resumed``, the break passed (None when there was none)."""
    async with handle.lock:  # a step in flight sets the watch's break
        passed = handle.session.watch.resume()
    answer = await step_response(state, handle, [])
    return {**answer, "resumed": passed.to_dict() if passed else None}


async def run_shadow(handle: SessionHandle, body: ShadowIn) -> ShadowResult:
    """The shadow continuation from step ``body.start`` of the session's steps so far, on the
    session's shadow thread (a newer one cancels it)."""
    session = handle.session
    records = list(session.steps)  # the steps now: a run may add more meanwhile

    def work(cancel: threading.Event) -> ShadowResult:
        return shadow(
            session.model,
            session.prompt,
            records,
            start=body.start,
            tokens=body.tokens,
            sampling=session.sampling if body.sampled else None,
            cancel=cancel,
        )

    return await handle.shadows.run(work)


def path_rows(handle: SessionHandle) -> list[dict[str, Any]]:
    """The session's steps added up by JSON path (and tool argument), the most mass removed
    first."""
    return [row.to_dict() for row in by_path(list(handle.session.steps))]
