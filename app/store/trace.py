"""A trace as the list of what the user did, reduced to its canonical form.

Generation is deterministic given the prompt, the grammar and (under sampling) the seed, so a
trace is fully described by which steps were generated and which tokens were forced. Backs and
re-steps that ended in the same place give the same canonical actions, hence the same link.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

__all__ = ["Action", "canonical_actions", "compress"]


class Action(Protocol):
    """One thing done to a session: ``step`` n, ``back`` n, or ``force`` a token (at a step)."""

    @property
    def op(self) -> str: ...
    @property
    def n(self) -> int: ...
    @property
    def token_id(self) -> int | None: ...
    @property
    def at(self) -> int | None: ...


def compress(entries: Iterable[int | None]) -> list[dict[str, Any]]:
    """Steps as actions: runs of generated steps (None) and forced tokens (their ids)."""
    actions: list[dict[str, Any]] = []
    for entry in entries:
        if entry is not None:
            actions.append({"op": "force", "token_id": entry})
        elif actions and actions[-1]["op"] == "step":
            actions[-1]["n"] += 1
        else:
            actions.append({"op": "step", "n": 1})
    return actions


def canonical_actions(actions: Sequence[Action]) -> list[dict[str, Any]]:
    """Resolve backs and forces-at into the steps they leave, then compress them.

    Runs of steps are kept as counts, never expanded: time and memory grow with the number of
    actions, not with the steps they stand for (4096 actions of 4096 steps each are 4096 runs).
    """
    runs: list[list[Any]] = []  # [None, n] for n generated steps, [token_id, 1] for a forced one
    length = 0

    def truncate(to: int) -> None:
        nonlocal length
        while length > to:
            excess = length - to
            if runs[-1][1] > excess:
                runs[-1][1] -= excess
                length = to
            else:
                length -= runs.pop()[1]

    for action in actions:
        if action.op == "step":
            if runs and runs[-1][0] is None:
                runs[-1][1] += action.n
            else:
                runs.append([None, action.n])
            length += action.n
        elif action.op == "back":
            truncate(max(length - action.n, 0))
        else:
            if action.at is not None:
                truncate(action.at)
            runs.append([action.token_id, 1])
            length += 1
    return [
        {"op": "step", "n": count} if entry is None else {"op": "force", "token_id": entry}
        for entry, count in runs
    ]
