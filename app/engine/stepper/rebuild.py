"""A shared trace rebuilt into a live session: its actions taken again, step by step, with the
forward passes of the steps whose tokens were recorded run at once, in one pass.

A trace says "n steps" for the model's own choices: the tokens are not in it, so each step would
wait for the previous step's forward pass. A permalink shared from a session also keeps the
records of its steps, whose token ids are what those steps chose. Told to the forward engine
ahead (:meth:`Session.expect`), they run as one prefill, which builds the KV cache the live
session continues from; each step then still fills its mask, chooses its token from its row of
that pass under the mask, accepts it and records it as before. The records are the session's
own (the mask shown is the mask applied), and a step that chooses another token than the one
recorded (another machine's float error at a near tie) drops the rest of the pass and runs on
step by step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from app.engine.stepper.session import Session
from app.exceptions import TokenRefused

__all__ = ["Progress", "rebuild", "trace_steps"]

#: Told ``(done, total)`` after each step rebuilt (and once before the first).
Progress = Callable[[int, int], None]


def trace_steps(actions: Sequence[dict[str, Any]]) -> int:
    """The steps a trace's actions take (``step`` counts its ``n``, ``force`` one)."""
    return sum(int(a.get("n", 1)) for a in actions)


def _ahead(actions: Sequence[dict[str, Any]], tokens: Sequence[int] | None) -> list[int]:
    """The tokens to feed ahead: ``tokens`` when they are the trace's (one per step, each forced
    one where the trace forces it), else none."""
    if not tokens or len(tokens) != trace_steps(actions):
        return []
    at = 0
    for action in actions:
        if action["op"] == "force" and tokens[at] != action["token_id"]:
            return []
        at += int(action.get("n", 1))
    return list(tokens)


def rebuild(
    session: Session,
    actions: Sequence[dict[str, Any]],
    *,
    tokens: Sequence[int] | None = None,
    batched: bool = True,
    progress: Progress | None = None,
) -> None:
    """Take a trace's actions (``{"op": "step", "n"}``, ``{"op": "force", "token_id"}``) on a
    new session.

    Args:
        session: the session, with no step taken.
        actions: the trace (canonical: see :func:`app.store.trace.canonical_actions`).
        tokens: the token each step took when the trace was recorded; with ``batched``, their
            forward passes run in one (ignored unless one per step, agreeing with the forces).
        batched: False runs every forward pass in its own step (the rebuild before #45).
        progress: told ``(done, total)`` before the first step and after each one.

    Raises:
        TokenRefused: a forced token the grammar blocks here (the trace does not replay).
    """
    total = trace_steps(actions)
    if progress is not None:
        progress(0, total)
    ahead = _ahead(actions, tokens) if batched else []
    overlap = session.overlap
    if ahead and session.expect(ahead):
        # No forward pass left to overlap: a step's checks beside it would only add the
        # hand-offs between threads (a wake-up each, milliseconds on a loaded machine).
        session.overlap = False
    try:
        _take(session, actions, total, progress)
    finally:
        session.overlap = overlap


def _take(
    session: Session, actions: Sequence[dict[str, Any]], total: int, progress: Progress | None
) -> None:
    done = 0
    for action in actions:
        for _ in range(int(action.get("n", 1))):
            if action["op"] == "step":
                if session.done:  # as ``run``: a trace's steps past the end are not taken
                    break
                session.step()
            else:
                try:
                    session.force(action["token_id"])
                except TokenRefused as refused:
                    raise TokenRefused(
                        f"the shared trace does not replay here: {refused.message}"
                    ) from None
            done += 1
            if progress is not None:
                progress(done, total)
