"""Request bodies of the debugger's instruments: breakpoints (in a session request) and the
shadow continuation."""

from __future__ import annotations

from pydantic import Field, model_validator

from app.caps import MAX_TOKENS
from app.engine.stepper.breakpoints import WHEN, Breakpoint, breakpoint_from
from app.exceptions import InvalidInput
from app.web.schemas.body_parts import Strict

__all__ = ["MAX_BREAKPOINTS", "MAX_SHADOW_TOKENS", "BreakpointIn", "ShadowIn"]

#: Breakpoints and alarms one session takes.
MAX_BREAKPOINTS = 32
#: Tokens one shadow continuation generates at most.
MAX_SHADOW_TOKENS = 256


class BreakpointIn(Strict):
    """Where a run stops (or, ``alarm_only``, which steps it marks)."""

    when: str = Field(max_length=32, description=f"one of {', '.join(WHEN)}")
    value: int | float | str | None = Field(
        default=None,
        description="path (a trailing * takes the paths inside it too), segment kind or tool, "
        "token id or text, count, probability",
    )
    k: int | None = Field(default=None, ge=1, le=MAX_TOKENS, description="steps running")
    alarm_only: bool = False

    @model_validator(mode="after")
    def _known(self) -> BreakpointIn:
        self.to_breakpoint()
        return self

    def to_breakpoint(self) -> Breakpoint:
        """The engine's breakpoint (a ValueError naming the field when it makes no sense)."""
        if isinstance(self.value, str) and len(self.value) > 1000:
            raise ValueError("value: at most 1000 characters")
        try:
            return breakpoint_from(self.when, self.value, self.k, alarm_only=self.alarm_only)
        except InvalidInput as error:
            raise ValueError(f"{(error.pointer or '/').lstrip('/')}: {error.message}") from None


class ShadowIn(Strict):
    """A continuation with no mask from step ``from`` (0: from the prompt)."""

    start: int = Field(default=0, ge=0, le=MAX_TOKENS, alias="from")
    tokens: int = Field(default=32, ge=1, le=MAX_SHADOW_TOKENS)
    sampled: bool = Field(
        default=False, description="draw with the session's sampling and seed (default: greedy)"
    )
