"""The serving stacks (``MASKSCOPE_STACKS``): each release's versions and whether it runs here."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from app.web.routes.encoding import json_response
from app.web.runtime.deps import StateDep
from app.web.schemas.bodies import DiffIn
from app.web.services import stacks as stacks_service
from app.web.services.walks import request_budget

__all__ = ["router"]

router = APIRouter()


@router.get("/api/stacks", tags=["stacks"])
async def stacks(state: StateDep) -> list[dict[str, Any]]:
    """Every stack: ``maskscope`` (in-process), then each configured release with its vllm,
    xgrammar, llguidance and transformers versions read in the stack's own process, whether
    it serves a model here (``forward``), whether its code runs, and the reason when not."""
    return await stacks_service.stacks(state)


@router.post("/api/diff", tags=["stacks"])
async def diff(body: DiffIn, state: StateDep, request: Request) -> Response:
    """The same source under two stacks (``stacks``: A then B): ``tag_diff``, every JSON pointer
    at which the tags the two releases build differ; ``grammar_diff``, a unified diff of the
    grammars their backends mask with; and, for a ``text``, ``token_ids`` or ``log`` walked,
    every step whose two rows differ (``steps``: the tokens only one allows, counted, with
    examples) and the first of them (``first_step``); ``doctor_diff``, the Doctor's findings,
    keyword rows and backend rows that differ between the grammars the two backends compile
    (each examined in the Doctor's workers). Each side is that stack's own code."""
    engine = state.engine_for(body.model)
    with request_budget(state, "the diff"):
        result = await stacks_service.diff(
            state, engine, body, disconnected=request.is_disconnected
        )
    return await json_response(result.to_dict())
