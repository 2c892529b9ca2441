"""A per-request CPU-time budget for walking text through a grammar matcher, and its cancel flag.

Some grammars compile in milliseconds yet cost more for each token as the text grows
(``root ::= root root | "a"``): a walk of a few hundred characters then runs for minutes in
the server process, where a matcher call cannot be interrupted. Every walk loop (replay, schema
tests, a session's step and its follower, segments) calls :func:`checkpoint` once per token; the
budget in force (a :class:`contextvars.ContextVar`, which the app's worker pools copy into
their threads) charges the walking thread's CPU time (:func:`time.thread_time`) since the last
checkpoint and stops the walk with :class:`~app.exceptions.GrammarTooSlow` once it is spent, or
with :class:`~app.exceptions.RequestEnded` once its cancel flag is set (the client left).

Usage::

    left = threading.Event()  # set by the web layer when the client disconnects
    with walk_budget(settings.walk_budget_s, cancelled=left, what="replay"):
        for i, token in enumerate(ids):
            checkpoint(i, total=len(ids))  # raises once the budget is spent or ``left`` is set
            matcher.accept_token(token)

No torch import here: any layer may use it.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from app.exceptions import GrammarTooSlow, RequestEnded

__all__ = [
    "WalkBudget",
    "carried",
    "checkpoint",
    "current_budget",
    "installed",
    "unbudgeted",
    "uncharged",
    "walk_budget",
]

T = TypeVar("T")

_CURRENT: contextvars.ContextVar[WalkBudget | None] = contextvars.ContextVar(
    "maskscope_walk_budget", default=None
)


class WalkBudget:
    """CPU seconds a request's grammar walks may use together, and the flag that cancels them.

    Only time between checkpoints of a thread that is :meth:`running` this budget is charged,
    so a request whose walk takes turns with other work (a session's forward pass, another
    session's step on the same pool thread) pays for its walks alone.

    Args:
        seconds: CPU seconds the walks may use; None for no limit (only the cancel flag).
        cancelled: set when the client leaves; a new, unset event when None.
        what: what walks, for the message ("the replay", "the step"...).
    """

    def __init__(
        self,
        seconds: float | None,
        *,
        cancelled: threading.Event | None = None,
        what: str = "the walk",
    ) -> None:
        if seconds is not None and seconds <= 0:
            raise ValueError(f"a walk budget is a positive number of seconds, not {seconds!r}")
        self.seconds = seconds
        self.cancelled = cancelled if cancelled is not None else threading.Event()
        self.what = what
        self.spent_s = 0.0
        #: The longest CPU time charged between two checkpoints (one library call, often).
        self.longest_s = 0.0
        self.done = 0
        #: Checkpoints that said how far their walk got: one a token a walk loop takes.
        self.walked = 0
        self.total: int | None = None
        self.unit = "tokens walked"
        self.chars: int | None = None
        self.checkpoints = 0
        self._marks: dict[int, float] = {}  # thread id -> its CPU clock when last charged

    def cancel(self) -> None:
        """Set the cancel flag: every walk under this budget stops at its next checkpoint."""
        self.cancelled.set()

    @contextlib.contextmanager
    def running(self) -> Iterator[WalkBudget]:
        """Make this the budget in force in the current context, charged from now on."""
        token = _CURRENT.set(self)
        thread = threading.get_ident()
        outer = self._marks.get(thread)
        self._marks[thread] = time.thread_time()
        try:
            yield self
        finally:
            self._charge(thread)
            if outer is None:
                del self._marks[thread]
            _CURRENT.reset(token)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Charge nothing for the work inside (a forward pass between two walks of a step)."""
        thread = threading.get_ident()
        if thread not in self._marks:
            yield
            return
        self._charge(thread)
        try:
            yield
        finally:
            self._marks[thread] = time.thread_time()

    def checkpoint(
        self,
        done: int | None = None,
        *,
        total: int | None = None,
        unit: str | None = None,
        chars: int | None = None,
    ) -> None:
        """Charge the CPU time since the last checkpoint; stop if spent or cancelled.

        Args:
            done: how far the walk got (tokens or characters walked); None keeps the last.
            total: how many it walks in all, when known; None keeps the last.
            unit: what ``done`` counts ("tokens walked", "characters walked", "tokens of
                output"); None keeps the last.
            chars: the characters of text walked so far, when the walk counts them.

        Raises:
            RequestEnded: the cancel flag is set (the client left).
            GrammarTooSlow: the budget is spent.
        """
        self.checkpoints += 1
        if done is not None:
            self.done = done
            self.walked += 1
        if total is not None:
            self.total = total
        if unit is not None:
            self.unit = unit
        if chars is not None:
            self.chars = chars
        if self.cancelled.is_set():
            raise RequestEnded(f"the client left: {self.what} was stopped after {self._far()}")
        self._charge(threading.get_ident())
        if self.seconds is not None and self.spent_s > self.seconds:
            raise GrammarTooSlow(self.message())

    def message(self) -> str:
        """What a :class:`~app.exceptions.GrammarTooSlow` says: how far, at what cost."""
        per = self.spent_s / max(self.walked, 1) * 1000
        return (
            f"{self.what} ran past its CPU-time budget of {self.seconds:g} s "
            f"(MASKSCOPE_WALK_BUDGET_S) after {self._far()}: {self.spent_s:.2f} s of CPU, "
            f"{per:.1f} ms a token (the slowest matcher call {self.longest_s * 1000:.1f} ms). "
            "This grammar compiles, but each token costs more as the text grows (an ambiguous "
            'rule such as `root ::= root root | "a"`): make it unambiguous, or walk a shorter text'
        )

    def _far(self) -> str:
        of = f" of {self.total}" if self.total is not None else ""
        chars = f" ({self.chars} characters)" if self.chars is not None else ""
        return f"{self.done}{of} {self.unit}{chars}"

    def _charge(self, thread: int) -> None:
        mark = self._marks.get(thread)
        if mark is None:  # a thread not running this budget (checkpoint outside running())
            self._marks[thread] = time.thread_time()
            return
        now = time.thread_time()
        spent = now - mark
        self._marks[thread] = now
        self.spent_s += spent
        if spent > self.longest_s:
            self.longest_s = spent


@contextlib.contextmanager
def walk_budget(
    seconds: float | None,
    *,
    cancelled: threading.Event | None = None,
    what: str = "the walk",
) -> Iterator[WalkBudget]:
    """A new :class:`WalkBudget` in force for the block (enter it in the walking thread).

    Args:
        seconds: CPU seconds the walks inside may use; None for no limit.
        cancelled: the flag set when the client leaves.
        what: what walks, for the message.
    """
    with WalkBudget(seconds, cancelled=cancelled, what=what).running() as budget:
        yield budget


@contextlib.contextmanager
def installed(budget: WalkBudget) -> Iterator[WalkBudget]:
    """``budget`` in force for the block without charging this thread (an event loop's task
    that hands its walks to pool threads, each entering :meth:`WalkBudget.running`)."""
    token = _CURRENT.set(budget)
    try:
        yield budget
    finally:
        _CURRENT.reset(token)


@contextlib.contextmanager
def unbudgeted() -> Iterator[None]:
    """No budget in force for the block (work that must finish: a session's own bookkeeping)."""
    token = _CURRENT.set(None)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def carried(fn: Callable[[], T]) -> Callable[[], T]:
    """``fn``, to run on another thread (a plain executor's) in this context and under the
    budget in force here, charged for that thread's CPU time while it runs."""
    context = contextvars.copy_context()
    budget = _CURRENT.get()

    def charged() -> T:
        if budget is None:
            return fn()
        with budget.running():
            return fn()

    return functools.partial(context.run, charged)


@contextlib.contextmanager
def uncharged() -> Iterator[None]:
    """Charge the budget in force nothing for the block (a one-off cost that is no walk: a
    forward pass, reading a vocabulary once), if one is in force."""
    budget = _CURRENT.get()
    if budget is None:
        yield
        return
    with budget.paused():
        yield


def current_budget() -> WalkBudget | None:
    """The budget in force in this context, if any."""
    return _CURRENT.get()


def checkpoint(
    done: int | None = None,
    *,
    total: int | None = None,
    unit: str | None = None,
    chars: int | None = None,
) -> None:
    """:meth:`WalkBudget.checkpoint` on the budget in force; nothing when none is.

    Raises:
        RequestEnded: the client left.
        GrammarTooSlow: the budget is spent.
    """
    budget = _CURRENT.get()
    if budget is not None:
        budget.checkpoint(done, total=total, unit=unit, chars=chars)
