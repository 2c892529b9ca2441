"""The template round trip over HTTP: ``POST /api/roundtrip``."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from app.web.routes.encoding import json_response
from app.web.runtime.deps import StateDep
from app.web.schemas.roundtrip import RoundTripIn
from app.web.services import roundtrip as service
from app.web.services.walks import request_budget

__all__ = ["router"]

router = APIRouter()


@router.post("/api/roundtrip", tags=["grammar"])
async def roundtrip(body: RoundTripIn, state: StateDep) -> Response:
    """Does the grammar accept what the model was trained to write? For each tool of a
    ``tools`` source, a minimal valid call (and each of ``calls``) is rendered by the chat
    template (the source's ``chat_template``, else the model's) as one call and as two parallel
    calls, with reasoning too under a ``reasoning_parser``; the text after the generation
    prompt is replayed through the tag the source's builder (or ``stack``) makes for the same
    request. Each case answers accepted, or where the tag first refuses it: the offset, what
    the template wrote, what the tag allows there, and the cause."""
    engine = state.engine_for(body.model)
    with request_budget(state, "the round trip"):
        results = await service.roundtrip(state, engine, body)
    return await json_response([service.answer(r) for r in results])
