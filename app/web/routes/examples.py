"""The example schemas the page offers."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path

from app.examples import load_all_examples

__all__ = ["router"]

router = APIRouter()


@router.get("/api/examples", tags=["examples"])
async def examples() -> list[dict[str, str]]:
    """The example schemas."""
    return [
        {"id": e.id, "title": e.title, "description": e.description} for e in load_all_examples()
    ]


@router.get("/api/examples/{example_id}", tags=["examples"])
async def example(example_id: Annotated[str, Path(max_length=64)]) -> dict[str, Any]:
    """One example: its sources by kind and the prompt it was written for."""
    found = next((e for e in load_all_examples() if e.id == example_id), None)
    if found is None:
        raise HTTPException(404, f"no example {example_id!r}")
    return {
        "id": found.id,
        "title": found.title,
        "description": found.description,
        "kind": found.kind,
        "sources": found.sources(),
        "system": found.system,
        "prompt": found.prompt,
        "max_tokens": found.max_tokens,
        "schema_in_prompt": found.schema_in_prompt,
    }
