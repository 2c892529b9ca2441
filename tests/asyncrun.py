"""Running a test's coroutine to its end, whatever loop the test's thread already runs."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["run", "until"]

T = TypeVar("T")


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coroutine)`` in a thread of its own: Playwright's sync API keeps a loop
    running in the main thread once a browser test has started it (under xdist, in the same
    worker), and ``asyncio.run`` refuses to start inside a running loop."""
    outcome: list[T] = []
    failure: list[BaseException] = []

    def main() -> None:
        try:
            outcome.append(asyncio.run(coroutine))
        except BaseException as error:  # handed to the test's thread
            failure.append(error)

    thread = threading.Thread(target=main, name="test-asyncio")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return outcome[0]


async def until(condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    """Poll ``condition`` on the loop until it holds (the positive signal a test waits for,
    never a fixed sleep); fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not after {timeout_s} s"
        await asyncio.sleep(0.005)
