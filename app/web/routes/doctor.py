"""The Doctor over HTTP: ``POST /api/doctor``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from app.web.runtime.deps import StateDep
from app.web.schemas.bodies import DoctorIn
from app.web.services.examine import examine

__all__ = ["router"]

router = APIRouter()


@router.post("/api/doctor", tags=["grammar"])
async def doctor(body: DoctorIn, state: StateDep, request: Request) -> dict[str, Any]:
    """Examine a grammar: each keyword enforced, ignored, weakened or warned; witnesses (documents
    on which grammar and schema disagree); what vLLM, SGLang, llguidance and OpenAI's strict mode
    do with it; and its costs. EBNF and regex get the costs and the llguidance row only."""
    engine = state.engine_for(body.model)
    report = await examine(state, engine, body, disconnected=request.is_disconnected)
    return report.to_dict()
