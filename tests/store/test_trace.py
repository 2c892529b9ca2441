from __future__ import annotations

import tracemalloc
from dataclasses import dataclass
from typing import Any

import pytest

from app.store.trace import canonical_actions, compress


@dataclass
class A:
    op: str
    n: int = 1
    token_id: int | None = None
    at: int | None = None


@pytest.mark.parametrize(
    ("actions", "expected"),
    [
        ([], []),
        ([A("step", 3)], [{"op": "step", "n": 3}]),
        ([A("step", 3), A("back", 1), A("step", 2)], [{"op": "step", "n": 4}]),
        ([A("step", 2), A("back", 9)], []),
        ([A("step", 2), A("force", token_id=7), A("step")],
         [{"op": "step", "n": 2}, {"op": "force", "token_id": 7}, {"op": "step", "n": 1}]),
        ([A("step", 5), A("force", token_id=7, at=1)],
         [{"op": "step", "n": 1}, {"op": "force", "token_id": 7}]),
        ([A("force", token_id=1), A("force", token_id=2)],
         [{"op": "force", "token_id": 1}, {"op": "force", "token_id": 2}]),
        ([A("step", 2), A("force", token_id=7), A("back", 1), A("step")], [{"op": "step", "n": 3}]),
        ([A("step", 2), A("force", token_id=7), A("step", 3), A("back", 4)],
         [{"op": "step", "n": 2}]),
        ([A("step", 3), A("force", token_id=7, at=9)],
         [{"op": "step", "n": 3}, {"op": "force", "token_id": 7}]),
        ([A("force", token_id=1), A("step", 2), A("force", token_id=2, at=0)],
         [{"op": "force", "token_id": 2}]),
    ],
)  # fmt: skip
def test_canonical_actions(actions: list[A], expected: list[dict[str, Any]]) -> None:
    assert canonical_actions(actions) == expected


def test_compress() -> None:
    assert compress([None, None, 5, None]) == [
        {"op": "step", "n": 2}, {"op": "force", "token_id": 5}, {"op": "step", "n": 1},
    ]  # fmt: skip


def test_a_huge_trace_is_never_expanded_into_steps() -> None:
    actions = [A("step", 4096)] * 4096 + [A("back", 4096 * 4096 - 5), A("force", token_id=3, at=2)]
    tracemalloc.start()
    try:
        canonical = canonical_actions(actions)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert canonical == [{"op": "step", "n": 2}, {"op": "force", "token_id": 3}]
    assert peak < 64 * 1024, f"{peak} bytes: the 16 million steps were laid out one by one"
