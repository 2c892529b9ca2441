"""Where the mask fought the model: a run's steps added up by JSON path (and tool argument).

Each row sums what the step records say: the tokens spent at the path, the steps where the
model's most probable token was blocked, the probability the mask removed, the forced tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from app.engine.records import StepRecord

__all__ = ["PathRow", "by_path", "place_of"]


@dataclass(slots=True)
class PathRow:
    """The steps taken at one place of the output.

    Attributes:
        path: the JSON path (``$.items[3].name``); inside a tool call, the tool and argument
            (``get_weather(city)``) before it; ``(text)`` for free text outside JSON.
        tokens: steps taken there.
        top1_blocked: those where the model's most probable token was blocked.
        removed_mass: the raw probability the mask removed there, summed.
        forced: those whose token was forced.
        steps: their indices, in order.
    """

    path: str
    tokens: int = 0
    top1_blocked: int = 0
    removed_mass: float = 0.0
    forced: int = 0
    steps: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "path": self.path,
            "tokens": self.tokens,
            "top1_blocked": self.top1_blocked,
            "removed_mass": self.removed_mass,
            "forced": self.forced,
            "steps": list(self.steps),
        }


def place_of(record: StepRecord) -> str:
    """The row a step counts in: its JSON path, led by the tool call and argument it is in."""
    segment = record.segment
    where = record.path
    if segment is not None and segment.tool is not None:
        argument = f"({segment.parameter})" if segment.parameter else ""
        where = f"{segment.tool}{argument} {where}".strip()
    return where or "(text)"


def by_path(records: Sequence[StepRecord]) -> list[PathRow]:
    """One row per place the steps were taken at, the most probability removed first."""
    rows: dict[str, PathRow] = {}
    for record in records:
        place = place_of(record)
        row = rows.get(place)
        if row is None:
            row = rows[place] = PathRow(place)
        row.tokens += 1
        row.top1_blocked += bool(record.top) and not record.top[0].allowed
        row.removed_mass += record.blocked_mass
        row.forced += record.forced
        row.steps.append(record.index)
    return sorted(rows.values(), key=lambda r: (-r.removed_mass, r.steps[0]))
