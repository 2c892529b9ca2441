"""A session on the page: opened from the form, stepped, undone, forced, run as a stream,
paused, inspected, shared."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from fastapi.responses import HTMLResponse, Response

from app.exceptions import InvalidInput
from app.web.middleware.rootpath import url
from app.web.runtime import quota
from app.web.runtime.deps import HandleDep, StateDep
from app.web.schemas.forms import forced_token, form_session_request, share_tests, step_count
from app.web.services import actions
from app.web.services import permalinks as sharing
from app.web.ui.fragments import (
    deletions,
    footer,
    fragments,
    inspector_context,
    render_page,
    step_parts,
)

__all__ = ["router"]

router = APIRouter(include_in_schema=False)


@router.post("/ui/sessions/{session_id}/share", response_class=HTMLResponse)
async def share_fragment(request: Request, state: StateDep, handle: HandleDep) -> HTMLResponse:
    """Store the session as a permalink, with the Tests panel's tests (the form's ``tests``,
    a JSON list) and their verdicts; the link, ready to copy."""
    body = share_tests(await request.form(), handle.request["grammar"])
    client = quota.admit_permalink(state.permalink_quota)
    snapshot_id = await sharing.share_session(state, handle, body)
    await quota.charge_permalink(state.permalink_quota, state.store, client, snapshot_id)
    context = {"url": f"{request.base_url}s/{snapshot_id}", "path": url(f"/s/{snapshot_id}"),
               "session_id": handle.id}  # fmt: skip
    return render_page(state, request, "partials/_share.html", context)


@router.post("/ui/sessions", response_class=HTMLResponse)
async def new_session(request: Request, state: StateDep) -> HTMLResponse:
    """Open a session from the form, on the picked model: its output area, and the rendered
    prompt and the footer out of band."""
    form = await request.form()
    handle = await actions.create_session(state, form_session_request(form))
    answer = await actions.step_response(state, handle, [])
    parts = [
        ("partials/_session.html", {"handle": handle, "state": answer}),
        ("partials/_prompt.html", {"prompt": handle.session.prompt, "oob": True}),
        footer(handle),
    ]
    return fragments(state, *parts)


@router.post("/ui/sessions/{session_id}/step", response_class=HTMLResponse)
async def step_fragment(request: Request, state: StateDep, handle: HandleDep) -> HTMLResponse:
    """``n`` steps (1 by default): their chips, with the inspector and status out of band."""
    n = step_count(await request.form())
    records = await actions.step(state, handle, n)
    return fragments(state, *await step_parts(state, handle, records))


@router.post("/ui/sessions/{session_id}/back", response_class=HTMLResponse)
async def back_fragment(state: StateDep, handle: HandleDep) -> HTMLResponse:
    """One step back: the last chip is removed."""
    before = len(handle.session.steps)
    await actions.back(state, handle, 1)
    removed = deletions(state, len(handle.session.steps), before)
    return fragments(state, *await step_parts(state, handle, []), prefix=removed)


@router.post("/ui/sessions/{session_id}/force", response_class=HTMLResponse)
async def force_fragment(request: Request, state: StateDep, handle: HandleDep) -> HTMLResponse:
    """Force a token at a step (going back to it first); 409 with the reason when blocked."""
    token_id, at = forced_token(await request.form())
    before = len(handle.session.steps)
    record = await actions.force(state, handle, token_id, at)
    removed = deletions(state, record.index, before)
    return fragments(state, *await step_parts(state, handle, [record]), prefix=removed)


@router.post("/ui/sessions/{session_id}/run", response_class=HTMLResponse)
async def run_fragment(state: StateDep, handle: HandleDep) -> HTMLResponse:
    """The element that opens the run stream (the SSE extension connects it)."""
    context = {"session_id": handle.id, "after": len(handle.session.steps) - 1}
    return HTMLResponse(state.render("partials/_runner.html", context))


@router.post("/ui/sessions/{session_id}/pause")
async def pause_fragment(handle: HandleDep) -> Response:
    """Ask the run to stop after the step in flight."""
    handle.runs.pause()
    return Response(status_code=204)


@router.get("/ui/sessions/{session_id}/steps/{index}", response_class=HTMLResponse)
async def inspector_fragment(
    request: Request, state: StateDep, handle: HandleDep, index: Annotated[int, Path(ge=0)]
) -> HTMLResponse:
    """The inspector for one step."""
    steps = handle.session.steps
    if index >= len(steps):
        raise InvalidInput(f"step {index} does not exist (the session has {len(steps)} steps)")
    context = inspector_context(handle, steps[index])
    return render_page(state, request, "partials/_inspector.html", context)
