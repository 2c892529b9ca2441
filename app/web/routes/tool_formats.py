"""The formats the tools builders know (vLLM's tool-call parsers, xgrammar's keys), and the values
vLLM takes for a tools source's serve flags."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from app.web.runtime.deps import StateDep
from app.web.services import serve_flags, tools

__all__ = ["router"]

router = APIRouter()


@router.get("/api/tool-formats", tags=["tools"])
async def tool_formats(state: StateDep, model: str | None = None) -> list[dict[str, Any]]:
    """Every format of both builders, read from the installed libraries at run time: its
    builder, name, whether it builds a tag, the marker that ends its reasoning, and whether it
    is available here (else the reason), checked against ``model``'s tokenizer when given. An
    unavailable builder is one row with an empty name."""
    return await tools.formats(state, model)


@router.get("/api/serve-flags", tags=["tools"])
async def serve_flag_options(state: StateDep, model: str | None = None) -> dict[str, Any]:
    """The tools source's fields that are vLLM serve flags (``reasoning_parser``,
    ``strict_level``, ``strict_tool_calling``), each with the request source's ``serve`` name,
    the flag and the values vLLM takes, read from its registries in its runner; and every
    reasoning parser with its end marker on ``model``'s tokenizer. While vLLM's code starts, or
    where it is unavailable, ``available`` is false, ``reason`` says why and no values are
    listed."""
    return await serve_flags.serve_flag_options(state, model)
