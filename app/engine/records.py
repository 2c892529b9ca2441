"""Plain records the engine returns: steps, replays, validations. Templates and JSON render them.

Field meanings are the public contract (``shared/API.md``, "Step record" and "Replay").
"""

from __future__ import annotations

import base64
import dataclasses
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Disagreement",
    "GrammarState",
    "Probe",
    "Rejection",
    "ReplayResult",
    "ReplayToken",
    "StepRecord",
    "TIMING_FIELDS",
    "TopToken",
    "Validation",
    "ValidationError",
]

#: Fields that may differ between two runs of the same step.
TIMING_FIELDS = frozenset({"forward_ms", "mask_us", "total_ms"})


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


@dataclass(frozen=True, slots=True)
class TopToken:
    """One candidate of the raw (unmasked, temperature 1) distribution."""

    token_id: int
    text: str
    prob: float
    logit: float
    allowed: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True)
class Disagreement:
    """A token whose mask bit and ``accept_token`` answer differ."""

    token_id: int
    mask: bool
    accept: bool


@dataclass(frozen=True, slots=True)
class Probe:
    """The mask/accept cross-check of one step: how many tokens were tried, which disagreed."""

    checked: int
    disagree: tuple[Disagreement, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"checked": self.checked, "disagree": [dataclasses.asdict(d) for d in self.disagree]}


@dataclass(frozen=True, slots=True)
class GrammarState:
    """Where the parser is: JSON depth and path (JSON output only) and the active rules."""

    depth: int
    path: str
    rules: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"depth": self.depth, "path": self.path, "rules": list(self.rules)}


@dataclass(frozen=True, slots=True)
class StepRecord:
    """Everything known about one generation step; see ``shared/API.md`` for each field."""

    index: int
    token_id: int
    token_text: str
    token_bytes: bytes
    forced: bool
    prob: float
    rank: int
    top: tuple[TopToken, ...]
    blocked_mass: float
    allowed_count: int
    vocab_size: int
    bitmask: bytes
    depth: int
    path: str
    rules: tuple[str, ...]
    jump_forward: str
    probe: Probe
    mask_accept_agree: bool
    engine: str
    forward_ms: float
    mask_us: float
    total_ms: float
    terminated: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: bytes as base64, tuples as lists."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["token_bytes"] = _b64(self.token_bytes)
        out["bitmask"] = _b64(self.bitmask)
        out["top"] = [t.to_dict() for t in self.top]
        out["rules"] = list(self.rules)
        out["probe"] = self.probe.to_dict()
        return out

    def without_timings(self) -> dict[str, Any]:
        """The record minus the timing fields: what must repeat after a back-and-step-again."""
        return {k: v for k, v in self.to_dict().items() if k not in TIMING_FIELDS}


@dataclass(frozen=True, slots=True)
class ReplayToken:
    """One token of a replay: whether the grammar accepted it, and the mask and parser state it
    was checked in (before it)."""

    token_id: int
    text: str
    accepted: bool
    allowed_count: int
    depth: int
    path: str
    rules: tuple[str, ...]
    bitmask: bytes

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["bitmask"] = _b64(self.bitmask)
        out["rules"] = list(self.rules)
        return out


@dataclass(frozen=True, slots=True)
class Rejection:
    """Where a replayed text leaves the grammar."""

    offset: int
    token_index: int
    token_text: str
    expected: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {**dataclasses.asdict(self), "expected": list(self.expected)}


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """A text or token list walked through the grammar without a model."""

    accepted: bool
    complete: bool
    tokens: tuple[ReplayToken, ...]
    rejection: Rejection | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "accepted": self.accepted,
            "complete": self.complete,
            "tokens": [t.to_dict() for t in self.tokens],
            "rejection": self.rejection.to_dict() if self.rejection else None,
        }


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
