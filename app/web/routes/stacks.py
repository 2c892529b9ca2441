"""The serving stacks (``MASKSCOPE_STACKS``): each release's versions and whether it runs here."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from app.web.runtime.deps import StateDep
from app.web.services import stacks as stacks_service

__all__ = ["router"]

router = APIRouter()


@router.get("/api/stacks", tags=["stacks"])
async def stacks(state: StateDep) -> list[dict[str, Any]]:
    """Every stack: ``maskscope`` (in-process), then each configured release with its vllm,
    xgrammar, llguidance and transformers versions read in the stack's own process, whether
    it serves a model here (``forward``), whether its code runs, and the reason when not."""
    return await stacks_service.stacks(state)
