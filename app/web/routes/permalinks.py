"""Permalinks: immutable snapshots of a session, stored, read back and reopened."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path
from fastapi.responses import JSONResponse, Response

from app.web.middleware.rootpath import url
from app.web.routes.encoding import json_response
from app.web.runtime import quota
from app.web.runtime.deps import EngineDep, StateDep
from app.web.schemas.bodies import OpenPermalinkIn, PermalinkIn
from app.web.services import actions
from app.web.services import permalinks as sharing

__all__ = ["router"]

router = APIRouter()


@router.post("/api/permalinks", tags=["permalinks"], status_code=201,
             responses={200: {"description": "the same snapshot already existed"}})  # fmt: skip
async def create_permalink(body: PermalinkIn, state: StateDep) -> JSONResponse:
    """Store an immutable snapshot; equal content gives an equal id (201 new, 200 existing).
    Its schema unit tests (``tests``) are run, and their verdicts kept with them. 429
    ``rate_limited`` (``Retry-After``) past the client's permalink quota
    (app/web/runtime/quota.py)."""
    client = quota.admit_permalink(state.permalink_quota)
    snapshot_id, created = await sharing.share_request(state, body)
    if created:
        await quota.charge_permalink(state.permalink_quota, state.store, client, snapshot_id)
    return JSONResponse(
        {"id": snapshot_id, "url": url(f"/s/{snapshot_id}")}, status_code=201 if created else 200
    )


@router.get("/api/permalinks/{snapshot_id}", tags=["permalinks"])
async def get_permalink(
    snapshot_id: Annotated[str, Path(max_length=64)], state: StateDep, _: EngineDep
) -> dict[str, Any]:
    """The stored snapshot, with the model and versions recorded at share time, and what differs
    from this server's; its tests (``[]`` when it holds none) with the verdicts kept from their
    last judgement here (``test_results``, each with ``differs`` from the verdicts recorded at
    share time, and ``status``: ``pending`` while they are judged again in the background)."""
    snapshot, created = await sharing.load(state, snapshot_id)
    differences = sharing.differences(state, snapshot)
    engine = sharing.engine_of(state, snapshot)
    results = await sharing.test_results(state, engine, snapshot_id, snapshot) if engine else []
    return {"id": snapshot_id, "created_at": created, "tests": [], **snapshot,
            "differences": differences, "test_results": results}  # fmt: skip


@router.post("/api/permalinks/{snapshot_id}/session", tags=["permalinks"])
async def open_permalink(
    snapshot_id: Annotated[str, Path(max_length=64)],
    state: StateDep,
    body: OpenPermalinkIn | None = None,
) -> Response:
    """Open a new session from the snapshot and replay its trace (409 if it does not replay, or
    names a model not configured here). ``model`` opens it on another model instead: its tokens
    may differ, and a forced token may not replay."""
    snapshot, _ = await sharing.load(state, snapshot_id)
    model = body.model if body else None
    handle = await sharing.open_snapshot(state, snapshot, model=model, snapshot_id=snapshot_id)
    answer = await actions.step_response(state, handle, list(handle.session.steps))
    return await json_response({**actions.session_answer(handle), **answer})
