"""A permalink's recorded trace: what its chips show, kept beside the snapshot at share time
(from the session's own records) and painted by ``/s/{id}`` before the live session is
rebuilt."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.engine import StepRecord

__all__ = ["RecordedFollower", "RecordedStep", "RecordedTop", "chip_records", "recorded_steps"]


@dataclass(frozen=True)
class RecordedTop:
    """The model's most probable token at a recorded step: what a chip's colour needs."""

    text: str
    allowed: bool


@dataclass(frozen=True)
class RecordedFollower:
    """The following engine's state at a recorded step, as far as a chip shows it."""

    diverged: bool
    ended_at: int | None


@dataclass(frozen=True)
class RecordedStep:
    """A step as its permalink recorded it at share time: the fields the chip partial reads,
    under a :class:`StepRecord`'s names, so the live session's own partial paints it."""

    index: int
    token_id: int
    token_text: str
    token_bytes: bytes
    prob: float
    rank: int
    allowed_count: int
    blocked_mass: float
    vocab_size: int
    depth: int
    terminated: bool
    forced: bool
    mask_accept_agree: bool
    jump_forward: str
    top: tuple[RecordedTop, ...]
    follower: RecordedFollower | None


def chip_records(steps: Sequence[StepRecord]) -> list[dict[str, Any]]:
    """What a permalink keeps of a session's steps for its chips (the engine's own records,
    taken as they are: nothing re-derived), JSON-ready."""
    return [
        {
            "index": s.index,
            "token_id": s.token_id,
            "token_text": s.token_text,
            "token_bytes": base64.b64encode(s.token_bytes).decode("ascii"),
            "prob": s.prob,
            "rank": s.rank,
            "allowed_count": s.allowed_count,
            "blocked_mass": s.blocked_mass,
            "vocab_size": s.vocab_size,
            "depth": s.depth,
            "terminated": s.terminated,
            "forced": s.forced,
            "mask_accept_agree": s.mask_accept_agree,
            "jump_forward": s.jump_forward,
            "top": [{"text": t.text, "allowed": t.allowed} for t in s.top[:1]],
            "follower": None
            if s.follower is None
            else {"diverged": s.follower.diverged, "ended_at": s.follower.ended_at},
        }
        for s in steps
    ]


def recorded_steps(records: list[dict[str, Any]] | None) -> list[RecordedStep]:
    """The recorded steps a permalink keeps, for the chip partial (none for an older one)."""
    steps = []
    for r in records or []:
        follower = r.get("follower")
        steps.append(
            RecordedStep(
                **{k: r[k] for k in _SCALARS},
                token_bytes=base64.b64decode(r["token_bytes"]),
                top=tuple(RecordedTop(t["text"], t["allowed"]) for t in r["top"]),
                follower=None
                if follower is None
                else RecordedFollower(follower["diverged"], follower["ended_at"]),
            )
        )
    return steps


_SCALARS = (
    "index", "token_id", "token_text", "prob", "rank", "allowed_count", "blocked_mass",
    "vocab_size", "depth", "terminated", "forced", "mask_accept_agree", "jump_forward",
)  # fmt: skip
