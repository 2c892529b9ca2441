"""The body of ``POST /api/roundtrip``: a ``tools`` source, the model, the stack, example calls."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from app.engine.stack_pins import MASKSCOPE, NAME_PATTERN
from app.settings import LOCAL_MODEL_ID
from app.web.schemas.bodies import GrammarIn
from app.web.schemas.body_parts import ModelId, Strict

__all__ = ["RoundTripCallIn", "RoundTripIn"]


class RoundTripCallIn(Strict):
    """An example call the round trip renders too (a call of one of the source's tools)."""

    name: str = Field(min_length=1, max_length=200, description="the tool's name")
    arguments: dict[str, Any] = Field(description="the call's arguments (a JSON object)")


class RoundTripIn(Strict):
    """``POST /api/roundtrip``: a ``tools`` source whose tool-call turns, as the chat template
    writes them, are replayed through the tag its builder (or ``stack``) makes."""

    grammar: GrammarIn
    model: ModelId = LOCAL_MODEL_ID
    stack: str = Field(
        default=MASKSCOPE,
        pattern=f"^{NAME_PATTERN}$",
        description="the serving stack whose own code builds the tag (GET /api/stacks)",
    )
    calls: list[RoundTripCallIn] = Field(
        default_factory=list, max_length=16, description="example calls rendered too"
    )
