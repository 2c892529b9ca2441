"""Waiting for a positive signal: a condition polled until it holds, never a fixed sleep."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["wait_until"]


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``timeout_s`` (a safety
    cap for a hung test, not a measure: a slow machine only waits longer)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not after {timeout_s} s"
        time.sleep(0.01)
