"""The run stream: server-sent events, one per step, generated off the event loop.

A run's steps are taken one after another on one thread, which never waits for the event loop:
the event loop is told of each step and sends it meanwhile. A session's next forward pass is
therefore asked for as soon as its step ends, and concurrent sessions meet in one batch (a hop
through the event loop between two steps would leave each session's row late for it).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import Literal, TypedDict

from app.engine import StepRecord
from app.exceptions import MaskscopeError, RequestEnded, ShuttingDown
from app.web.runtime.sessions import SessionHandle
from app.web.runtime.state import AppState
from app.web.services.actions import step_response
from app.web.services.walks import step_budget

__all__ = [
    "END_ID",
    "SHUTDOWN_GRACE_S",
    "SHUTDOWN_MESSAGE",
    "Event",
    "error_event",
    "run_events",
    "shutdown_event",
]

#: The SSE id of the ``end`` event: a client that reconnects with it has seen the whole run.
END_ID = "end"
#: How long a stream has, once the server stops, to send its step in flight and ``shutdown``
#: before sse-starlette cancels it (well inside serve's graceful shutdown).
SHUTDOWN_GRACE_S = 3.0
#: What the ``shutdown`` event says (its data, a JSON object's ``message``).
SHUTDOWN_MESSAGE = "the server is restarting: the run stopped after its last step"


class _EventFields(TypedDict):
    event: str
    data: str


class Event(_EventFields, total=False):
    """One server-sent event: its name, data, and (for ``step`` and ``end``) its SSE id."""

    id: str


def shutdown_event() -> Event:
    """The event that ends a stream when the server stops: JSON ``{"message"}`` in both formats
    (the page's script shows the message; htmx swaps nothing)."""
    return {"event": "shutdown", "data": json.dumps({"message": SHUTDOWN_MESSAGE})}


def error_event(error: MaskscopeError) -> Event:
    """The event that ends a run whose step failed (its budget spent: ``grammar_too_slow``):
    ``failed`` with ``{"error": {"code", "message"}}``, the API's error object (not ``error``,
    which an ``EventSource`` also fires for a lost connection)."""
    return {"event": "failed", "data": json.dumps({"error": error.to_dict()})}


async def run_events(
    disconnected: Callable[[], Awaitable[bool]],
    state: AppState,
    handle: SessionHandle,
    *,
    after: int,
    fmt: Literal["html", "json"],
    resume: bool = False,
) -> AsyncIterator[Event]:
    """Send the steps after index ``after``, then generate until done, paused or disconnected.

    Every index is sent exactly once: the steps to send are read from the session's record
    after each step, so a step still in flight when this stream started (for a stream whose
    client left) is sent too, never lost and never generated again. A newer stream for the same
    session takes the run over; this one then ends. A reconnect (``resume``, from
    ``Last-Event-ID``) continues the run it lost; when that run is already over it gets the rest
    of its events and generates nothing.

    Events: ``step`` (SSE id = the step index), then ``done`` when the session has stopped or
    ``paused`` when a pause ended the run (after ``break``, ``{"index", "when", "label",
    "value"}``, when a breakpoint started to hold at the last step), then ``end`` (SSE id
    ``end``). A step that fails
    (its walk budget spent: 422 ``grammar_too_slow`` as a request) ends the run with ``failed``
    (the error object; the step left no trace, the session is as before it), then ``end``.
    When the server stops (SIGTERM), the run ends after its step in flight with ``shutdown``
    (no ``end``: the run is not over, and a client may resume it elsewhere once it is back).

    Args:
        disconnected: whether the client has left (the stream then stops generating).
        state: the app.
        handle: the session to run.
        after: the index of the last step the client has.
        fmt: each step as its chip's HTML, or as its record.
        resume: a reconnect (``Last-Event-ID``) continuing the run it lost.
    """
    session = handle.session
    runs = handle.runs
    run = runs.start(resume=resume)

    def step_event(record: StepRecord) -> Event:
        if fmt == "json":
            data = json.dumps(record.to_dict())
        else:
            data = state.render("partials/_chip.html", {"step": record, "with_bitmask": True})
        return {"event": "step", "id": str(record.index), "data": data}

    held = session.watch.hit  # a break the client has seen: this run goes on past it

    def broke() -> bool:  # a breakpoint started to hold at a step this run took
        hit = session.watch.hit
        return hit is not None and hit is not held

    def generating() -> bool:
        return runs.generating(run) and not session.done and not broke()

    sent = after + 1
    try:
        while True:
            sent = min(sent, len(session.steps))
            for record in session.steps[sent:]:
                yield step_event(record)
                sent += 1
            if not generating():
                break
            if await disconnected():
                return
            if state.shutdown.started:
                yield shutdown_event()
                return
            # Only when nothing is left to send: the lock may have been held by a step an older
            # stream started, whose record is then sent first.
            stepping = _stepping(state, handle, run, disconnected, sent=sent, broke=broke)
            try:
                async with aclosing(stepping):
                    async for _ in stepping:
                        for record in session.steps[sent:]:
                            yield step_event(record)
                            sent += 1
            except RequestEnded:
                return  # nobody listens any more
            except MaskscopeError as error:  # a step failed (grammar_too_slow...): left no trace
                for record in session.steps[sent:]:
                    yield step_event(record)
                if runs.current(run):
                    runs.end(run)
                yield error_event(error)
                yield {"event": "end", "id": END_ID, "data": ""}
                return
            state.sessions.enforce_memory(keep=handle)
        if not runs.current(run):
            return
        runs.end(run)
        if broke() and session.watch.hit is not None:
            yield {"event": "break", "data": json.dumps(session.watch.hit.to_dict())}
        answer = await step_response(state, handle, [])
        event = "done" if session.done else "paused"
        if fmt == "json":
            data = json.dumps({**answer, "paused": not session.done})
        else:
            context = {"state": answer, "handle": handle, "paused": not session.done}
            data = state.render("partials/_status.html", context)
        yield {"event": event, "data": data}
        yield {"event": "end", "id": END_ID, "data": ""}
    finally:
        runs.finish(run)


async def _stepping(
    state: AppState,
    handle: SessionHandle,
    run: int,
    disconnected: Callable[[], Awaitable[bool]],
    *,
    sent: int,
    broke: Callable[[], bool] = lambda: False,
) -> AsyncGenerator[None, None]:
    """Under the session's lock, if ``run`` is generating and the session holds ``sent`` steps
    then, step it on one thread of the step pool until it stops; yields after each step.

    The thread stops before a step when the run is not generating any more (paused, taken
    over, done, ``broke``: a breakpoint holds), the server stops, or the client left (asked
    after each step sent, and when this generator is closed). The lock is released when the
    thread is done, whatever this generator is doing then (a stream blocked on a slow client
    holds no lock).
    """
    session, runs = handle.session, handle.runs
    await handle.lock.acquire()
    if not (runs.generating(run) and not session.done and len(session.steps) == sent):
        handle.lock.release()
        return
    loop = asyncio.get_running_loop()
    told: asyncio.Queue[bool] = asyncio.Queue()
    stop = threading.Event()
    left = threading.Event()  # the client left: the step in flight stops at its next token
    each = step_budget(state, session, left)

    def tell() -> None:
        try:
            loop.call_soon_threadsafe(told.put_nowait, True)
        except RuntimeError:  # the loop has closed: nobody listens any more
            stop.set()

    def steps() -> None:
        while not stop.is_set() and runs.generating(run) and not (session.done or broke()):
            if state.shutdown.started:
                return  # the stream sends the shutdown event
            each(session.step)
            tell()

    def over(job: asyncio.Future[None]) -> None:
        handle.lock.release()
        if not job.cancelled():
            job.exception()  # retrieved: when the stream left early, nobody else will
        told.put_nowait(False)

    job = asyncio.ensure_future(state.pools.steps.run(steps))
    job.add_done_callback(over)
    try:
        while await told.get():
            yield
            if await disconnected():
                stop.set()
                left.set()
            state.sessions.enforce_memory(keep=handle)
        await job
    except ShuttingDown:
        pass  # the pool closed before the run began: the next turn sends the shutdown event
    finally:
        stop.set()
        if not job.done():  # closed early: its client left, or the stream was cancelled
            left.set()
