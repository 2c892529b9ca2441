"""Examining a grammar with the Doctor, for ``POST /api/doctor`` and the page's Doctor tab.

The examination runs in one of the Doctor's worker processes (:mod:`app.doctor.worker`), waited
for on a thread of the ``doctors`` pool; the process is killed when the request ends (its client
left, or the request was cancelled), so no core stays busy for nobody.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import TypedDict

from app.doctor import DoctorReport, PydanticSource, Status
from app.doctor.doctor import DEFAULT_BUDGET_MS
from app.doctor.worker import Stop
from app.engine import AnyEngine, GrammarSpec
from app.exceptions import RequestEnded
from app.web.runtime.state import AppState
from app.web.schemas.bodies import DoctorIn
from app.web.services import actions

__all__ = ["EditorMark", "editor_marks", "examine", "examined"]

#: How often a running examination looks whether its client is still there.
_WATCH_S = 0.25


class EditorMark(TypedDict):
    """A lint mark the editor shows on a line."""

    line: int
    severity: str
    message: str


async def examine(
    state: AppState,
    engine: AnyEngine,
    body: DoctorIn,
    *,
    disconnected: Callable[[], Awaitable[bool]] | None = None,
) -> DoctorReport:
    """Resolve the grammar request (Pydantic through the sandbox) and examine it in a worker
    process, stopped when the request ends.

    Args:
        state: the app's state (its pools and the Doctor's processes).
        engine: the engine whose tokenizer and compiles are examined.
        body: the request.
        disconnected: whether the client has left (``Request.is_disconnected``); polled while
            the examination runs.

    Raises:
        GrammarError: the request does not compile, or (``GrammarTooComplex``) the examination
            ran past its memory limit: properties of the schema.
        CutShortByLoad: the examination ran past its wall-clock safety stop (its work is a
            fixed count, so only load takes it there): a 503, never ``grammar_too_complex``.
        RequestEnded: the client left; the examination was stopped.
    """
    resolved = await actions.resolve(state, body.grammar, engine)
    pydantic = None
    if resolved.pydantic is not None:
        source, root_model = body.grammar.source, body.grammar.options.root_model
        validate = functools.partial(state.sandbox.validate_many, source, root_model)
        pydantic = PydanticSource(source, resolved.pydantic.root, validate)
    return await examined(
        state,
        engine,
        resolved.spec,
        seed=body.seed,
        budget_ms=body.budget_ms,
        pydantic=pydantic,
        max_tokens=body.max_tokens,
        disconnected=disconnected,
    )


async def examined(
    state: AppState,
    engine: AnyEngine,
    spec: GrammarSpec,
    *,
    seed: int = 0,
    budget_ms: int = DEFAULT_BUDGET_MS,
    pydantic: PydanticSource | None = None,
    max_tokens: int | None = None,
    disconnected: Callable[[], Awaitable[bool]] | None = None,
) -> DoctorReport:
    """``spec`` examined on ``engine`` in one of the Doctor's worker processes (killable,
    memory-capped: never in the server's own threads), stopped when the request ends.

    Raises:
        GrammarError: the request does not compile, or the examination ran past its memory
            limit (``GrammarTooComplex``).
        CutShortByLoad: the examination ran past its wall-clock safety stop.
        RequestEnded: the client left; the examination was stopped.
    """
    stop = Stop()
    job = asyncio.ensure_future(
        state.pools.doctors.run(
            state.pools.doctor_workers.of(engine).examine,
            spec,
            seed=seed,
            budget_ms=budget_ms,
            pydantic=pydantic,
            max_tokens=max_tokens,
            stop=stop,
        )
    )
    try:
        while True:
            done, _ = await asyncio.wait({job}, timeout=_WATCH_S)
            if done:
                if job.cancelled():
                    raise RequestEnded("the client left: the Doctor's examination was stopped")
                return job.result()
            if disconnected is not None and await disconnected():
                _stop(job, stop)
    finally:
        if not job.done():  # cancelled: the process goes now, its thread soon after
            _stop(job, stop)
            job.add_done_callback(_retrieved)


def _stop(job: asyncio.Future[DoctorReport], stop: Stop) -> None:
    """Stop an examination: a running one's process is killed, a waiting one leaves the queue
    (so it no longer counts against the client's share). Once: a second cancel would stop
    the pool's wait for the thread, and its error would go unread."""
    if not stop.is_set():
        stop.set()
        job.cancel()


def _retrieved(job: asyncio.Future[DoctorReport]) -> None:
    if not job.cancelled():
        job.exception()  # the caller is gone; nobody else will look


def editor_marks(report: DoctorReport) -> list[EditorMark]:
    """Lint marks for the editor: each ignored or weakened keyword that has a line."""
    return [
        {"line": k.line, "severity": "warning",
         "message": f"{k.keyword} {k.status.value} by xgrammar: {k.detail}"}
        for k in report.keywords
        if k.line is not None and k.status in (Status.IGNORED, Status.WEAKENED)
    ]  # fmt: skip
