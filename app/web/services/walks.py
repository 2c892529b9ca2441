"""Walks through a grammar matcher on a pool thread, under the request's CPU-time budget.

A request that walks text through a matcher (a replay and the re-walks that explain its refusal,
schema tests, a session's step) runs under one :class:`~app.engine.budget.WalkBudget` of
``MASKSCOPE_WALK_BUDGET_S``: its walks stop with 422 ``grammar_too_slow`` once they have used it,
and at their next token once the client leaves (:mod:`app.web.middleware.departure`) or the request
is
cancelled (the pool cancels the budget in force when its caller is).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import ParamSpec, Protocol, TypeVar

from app.engine import Session
from app.engine.budget import WalkBudget, current_budget, installed
from app.web.middleware.departure import on_client_leaving
from app.web.runtime.executors import WorkPool
from app.web.runtime.state import AppState

__all__ = ["Budgeted", "request_budget", "step_budget", "stepped", "walked"]

P = ParamSpec("P")
T = TypeVar("T")
R = TypeVar("R")


class Budgeted(Protocol):
    """Calls one action of a session (a step, a force) under a walk budget of its own."""

    def __call__(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R: ...


@contextlib.contextmanager
def request_budget(state: AppState, what: str) -> Iterator[WalkBudget]:
    """One budget for every walk of the block (a request's), cancelled when its client leaves;
    the budget already in force when there is one (a walk inside a larger request)."""
    budget = current_budget()
    if budget is not None:
        yield budget
        return
    budget = WalkBudget(state.settings.walk_budget_s, what=what)
    with on_client_leaving(budget.cancel), installed(budget):
        yield budget


async def walked(
    state: AppState,
    pool: WorkPool,
    what: str,
    fn: Callable[P, T],
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    """``fn(*args, **kwargs)`` on a thread of ``pool``, charged to the request's budget
    (:func:`request_budget`, a new one unless the caller holds one).

    Raises:
        GrammarTooSlow: the walk used up the budget.
        RequestEnded: the client left; the walk stopped at its next token.
    """
    with request_budget(state, what) as budget:

        def work() -> T:
            with budget.running():
                return fn(*args, **kwargs)

        return await pool.run(work)


def step_budget(state: AppState, session: Session, cancelled: threading.Event) -> Budgeted:
    """What runs each step of ``session`` under a budget of its own (``walk_budget_s``: a run
    of thousands of steps is no more bounded than one), all cancelled by ``cancelled``.

    A step that runs out fails whole (a step is a transaction: the session stays as it was
    before it), so the session stays usable: going back makes the next step cheaper."""

    def each(fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        budget = WalkBudget(
            state.settings.walk_budget_s, cancelled=cancelled, what="this step of the session"
        )
        with budget.running():
            return fn(*args, **kwargs)

    return each


async def stepped(state: AppState, session: Session, work: Callable[[Budgeted], T]) -> T:
    """``work`` on a thread of the step pool, given what runs each of its steps under a budget
    (:func:`step_budget`), cancelled when the client leaves or the request is cancelled.

    Raises:
        GrammarTooSlow: a step used up its budget; that step left no trace.
        RequestEnded: the client left; the step in flight stopped at its next token.
    """
    watch = WalkBudget(None, what="the steps")  # the pool cancels it with its caller
    each = step_budget(state, session, watch.cancelled)
    with on_client_leaving(watch.cancel), installed(watch):
        return await state.pools.steps.run(work, each)
