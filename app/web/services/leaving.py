"""Work a request waits for, withdrawn when its client leaves.

uvicorn never cancels a handler whose client left (``app.web.middleware.departure``): a compile
that a picker change replaced on the page (htmx aborts the old request) would still wait for a
worker, and a few quick changes filled the client's share of the queue, so the next compile got
a 429 (issue 45). Here the job leaves the queue as soon as its client leaves; a job already
running is left to end (its result is cached for the next request), and is never cancelled twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from app.exceptions import RequestEnded
from app.web.middleware.departure import on_client_leaving

__all__ = ["unless_left"]

T = TypeVar("T")


async def unless_left(work: Awaitable[T], what: str) -> T:
    """``await work`` (a pool's ``run``), withdrawn from its queue if the client leaves first.

    Raises:
        RequestEnded: the client left, and the work never ran or its answer has nobody to go to.
    """
    job = asyncio.ensure_future(work)
    asked: list[bool] = []

    def withdraw() -> None:
        if not asked:  # a second cancel would stop the pool's wait for a running thread
            asked.append(True)
            job.cancel()

    with on_client_leaving(withdraw):
        await asyncio.wait({job})
    if job.cancelled():
        raise RequestEnded(f"the client left: its {what} was withdrawn")
    return job.result()
