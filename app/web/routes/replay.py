"""Replaying a text or token ids through a grammar, without the model: ``POST /api/replay``."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from app.web.bodies import ReplayIn
from app.web.deps import StateDep
from app.web.routes.encoding import json_response
from app.web.services import actions

__all__ = ["router"]

router = APIRouter()


@router.post("/api/replay", tags=["grammar"])
async def replay(body: ReplayIn, state: StateDep) -> Response:
    """Walk a text or token ids through the grammar, without the model (with the tokenizer of
    the one ``model`` names): at most ``MASKSCOPE_REPLAY_MAX_TOKENS`` tokens (413 beyond),
    bitmasks only for ``bitmask_for``."""
    result = await actions.replay(state, state.engine_for(body.model), body)
    return await json_response(result.to_dict())
