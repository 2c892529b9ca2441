"""Compiling a grammar: ``POST /api/compile``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from app.web.runtime.deps import StateDep
from app.web.schemas.bodies import CompileIn
from app.web.services import actions

__all__ = ["router"]

router = APIRouter()


@router.post("/api/compile", tags=["grammar"])
async def compile_grammar(body: CompileIn, state: StateDep) -> dict[str, Any]:
    """Compile a grammar request for the tokenizer of the model ``model`` names: the grammar
    text, xgrammar's warnings, compile stats."""
    result, resolved = await actions.compile_grammar(state, state.engine_for(body.model), body)
    return actions.compile_answer(result, body, resolved)
