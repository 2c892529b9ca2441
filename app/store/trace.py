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
    """Resolve backs and forces-at into the steps they leave, then compress them."""
    entries: list[int | None] = []
    for action in actions:
        if action.op == "step":
            entries.extend([None] * action.n)
        elif action.op == "back":
            del entries[max(len(entries) - action.n, 0) :]
        else:
            if action.at is not None:
                del entries[action.at :]
            entries.append(action.token_id)
    return compress(entries)
