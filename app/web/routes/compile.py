"""Compiling a grammar: ``POST /api/compile``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from app.web.runtime.deps import StateDep
from app.web.schemas.bodies import CompileIn
from app.web.services import actions
from app.web.services.tools_prompt import tools_prompt

__all__ = ["router"]

router = APIRouter()


@router.post("/api/compile", tags=["grammar"])
async def compile_grammar(body: CompileIn, state: StateDep) -> dict[str, Any]:
    """Compile a grammar request for the tokenizer of the model ``model`` names: the grammar
    text, xgrammar's warnings, compile stats; for a ``tools`` source, its prompt's token count
    with and without each option that changes it."""
    engine = state.engine_for(body.model)
    result, resolved = await actions.compile_grammar(state, engine, body)
    answer = actions.compile_answer(result, body, resolved)
    prompt = await tools_prompt(state, engine, resolved.spec)
    return answer if prompt is None else answer | {"prompt": prompt}
