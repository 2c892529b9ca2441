"""The verdict on an output checked against its source's own semantics.

Neutral ground: the engine (jsonschema) and the sandbox (the Pydantic model itself) both return
these, and neither imports the other.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

__all__ = ["Validation", "ValidationError"]


@dataclass(frozen=True, slots=True)
class ValidationError:
    """One way the output breaks the source's own semantics."""

    path: str
    message: str


@dataclass(frozen=True, slots=True)
class Validation:
    """The verdict on a finished output, checked against the source (not the grammar)."""

    valid: bool
    errors: tuple[ValidationError, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"valid": self.valid, "errors": [dataclasses.asdict(e) for e in self.errors]}
