"""The formats the tools builders know (vLLM's tool-call parsers, xgrammar's keys)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from app.web.runtime.deps import StateDep
from app.web.services import tools

__all__ = ["router"]

router = APIRouter()


@router.get("/api/tool-formats", tags=["tools"])
async def tool_formats(state: StateDep, model: str | None = None) -> list[dict[str, Any]]:
    """Every format of both builders, read from the installed libraries at run time: its
    builder, name, whether it builds a tag, the marker that ends its reasoning, and whether it
    is available here (else the reason), checked against ``model``'s tokenizer when given. An
    unavailable builder is one row with an empty name."""
    return await tools.formats(state, model)
