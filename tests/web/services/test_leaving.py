"""A compile the page replaced leaves the queue when its client goes (issue 45, item 3): through
the real departure middleware and a real work pool, one client's stale requests never fill its
share of the queue (the 429 a picker change met)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from app.exceptions import CapacityExceeded, RequestEnded
from app.web.middleware.departure import ClientDeparture
from app.web.runtime.executors import WorkPool
from app.web.services.leaving import unless_left
from tests.asyncrun import run


def _request(pool: WorkPool, ran: list[str], outcome: list[str], name: str) -> Any:
    """An ASGI app whose request queues ``name`` on ``pool`` and records how it ended."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()  # the body read: the middleware watches for the client's departure
        try:
            await unless_left(pool.run(ran.append, name), "compile")
            outcome.append(f"{name} ran")
        except RequestEnded:
            outcome.append(f"{name} withdrawn")
        except CapacityExceeded:
            outcome.append(f"{name} refused")

    return ClientDeparture(app)


async def _client(app: Any, leaves: asyncio.Event | None) -> None:
    """One request; its client goes once ``leaves`` is set (never, when None)."""
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": b"", "more_body": False}
        if leaves is None:
            await asyncio.Event().wait()
        else:
            await leaves.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        pass

    await app({"type": "http", "path": "/ui/compile"}, receive, send)


async def _picker_changes() -> tuple[list[str], list[str]]:
    pool = WorkPool("compile", threads=1, queue=8, queue_per_client=2)
    busy = threading.Event()
    running = asyncio.ensure_future(pool.run(busy.wait, 30))  # the one worker is busy
    ran: list[str] = []
    outcome: list[str] = []
    # Five changes in a row: each aborts the request before it (htmx's hx-sync replace), whose
    # client then leaves, and sends its own; the client's share of the queue is two.
    leaves = [asyncio.Event() for _ in range(4)] + [None]
    requests: list[asyncio.Future[None]] = []
    for i, left in enumerate(leaves):
        if i:  # (a request never withdrawn times out here)
            leaves[i - 1].set()  # type: ignore[union-attr]
            await asyncio.wait_for(requests[-1], 10)  # answered: withdrawn, or refused
        requests.append(asyncio.ensure_future(_client(_request(pool, ran, outcome, f"c{i}"), left)))
        while pool.pending < 2 and not requests[-1].done():  # queued behind the busy worker
            await asyncio.sleep(0.01)
    busy.set()
    try:
        await asyncio.wait_for(asyncio.gather(running, requests[-1]), 10)
    finally:
        busy.set()
        pool.shutdown()
    return ran, outcome


def test_replaced_compiles_leave_the_queue_and_the_last_one_runs() -> None:
    ran, outcome = run(_picker_changes())
    assert ran == ["c4"]  # only the change the page still shows was compiled
    assert sorted(outcome) == ["c0 withdrawn", "c1 withdrawn", "c2 withdrawn", "c3 withdrawn",
                               "c4 ran"]  # fmt: skip
