"""The models a request may name, and the vocabulary of each one's tokenizer."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from app.settings import LOCAL_MODEL_ID
from app.web.runtime.deps import StateDep

__all__ = ["router"]

router = APIRouter()


@router.get("/api/models", tags=["models"])
async def models(state: StateDep) -> list[dict[str, Any]]:
    """The local model and the remote engines (``MASKSCOPE_REMOTE_ENGINES``), each with its
    readiness and, when not ready, the reason."""
    return state.models()


@router.get("/api/vocab", tags=["examples"])
async def vocab(
    state: StateDep,
    model: Annotated[str, Query(max_length=64, description="`local` or a remote engine's id")] = (
        LOCAL_MODEL_ID
    ),
) -> JSONResponse:
    """The text of every token id of the tokenizer of the model ``model`` names, for the bitmask
    picture and the token search."""
    tokens = state.engine_for(model).model.tokens
    texts = [tokens.text(i) for i in range(tokens.vocab_size)]
    return JSONResponse(
        {"vocab_size": tokens.vocab_size, "tokens": texts},
        headers={"Cache-Control": "max-age=3600"},
    )
