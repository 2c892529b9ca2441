"""Running a test's coroutine to its end, whatever loop the test's thread already runs."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["run"]

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
