"""The debugger's instruments: pass a break, the shadow continuation, the steps by path."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from app.web.runtime.deps import HandleDep, StateDep
from app.web.schemas.instruments import ShadowIn
from app.web.services import instruments

__all__ = ["router"]

router = APIRouter()


@router.post("/api/sessions/{session_id}/resume", tags=["sessions"])
async def resume(handle: HandleDep, state: StateDep) -> dict[str, Any]:
    """Pass the break the last run stopped at: no run stops on that condition at that step
    again (going back over it included). The step response, with ``resumed`` (the break)."""
    return await instruments.resume(state, handle)


@router.post("/api/sessions/{session_id}/shadow", tags=["sessions"])
async def shadow(handle: HandleDep, body: ShadowIn | None = None) -> dict[str, Any]:
    """The model's continuation with no mask from step ``from`` (0: the prompt), greedy unless
    ``sampled``; where it parts from the session's tokens and the mass the mask removed up to
    there. A newer shadow of the session cancels this one (``cancelled`` then)."""
    result = await instruments.run_shadow(handle, body or ShadowIn())
    return result.to_dict()


@router.delete("/api/sessions/{session_id}/shadow", tags=["sessions"])
async def cancel_shadow(handle: HandleDep) -> dict[str, bool]:
    """Cancel the session's shadow under way: ``{"cancelled"}``, whether one was."""
    return {"cancelled": handle.shadows.cancel()}


@router.get("/api/sessions/{session_id}/by-path", tags=["sessions"])
async def by_path(handle: HandleDep) -> list[dict[str, Any]]:
    """The steps added up by JSON path (and tool argument): tokens, steps whose top-1 was
    blocked, mass removed, forced tokens, and the steps' indices; the most mass removed first."""
    return instruments.path_rows(handle)
