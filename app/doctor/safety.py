"""The Doctor's wall-clock safety stop: time cuts an examination short only when the machine is
too busy to do its fixed work in time.

Every part of an examination (the witness search, the proofs of the keywords, one tool's
arguments) is bounded by counts: documents written and drawn, tokens walked per document and in
all, documents judged, keywords compared. The same schema, options and seed do the same work
and give the same answer on any machine, loaded or not; a count reached is a property of the
schema, and the answer says so deterministically.

A :class:`Deadline` is the safety stop beside those counts: the wall-clock time of the Doctor's
own work, paused while it waits for the server (a compile, the sandbox's validation), and never
started before the worker and its tokenizer are loaded. Reaching it means "cut short by load":
the answer says so (``cut_short_by_load``, or a 503 ``cut_short_by_load`` where the worker had
to be killed), never that the schema is too complex.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

__all__ = ["LOAD_NOTE", "Deadline", "Expired"]

#: What a part cut short by its safety stop says, in words.
LOAD_NOTE = (
    "cut short by load: this part's fixed work did not finish within budget_ms, its wall-clock "
    "safety stop (a count bounds the work, not the time): try again"
)


class Expired(Exception):
    """Raised inside a part when its deadline has passed; the part answers with what it has."""


class Deadline:
    """The wall-clock safety stop of one part of an examination.

    Args:
        seconds: the Doctor's own time the part may take.
        clock: the clock (``time.monotonic``; a test may pass its own).
    """

    def __init__(self, seconds: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._clock = clock
        self._start = clock()
        self._paused_s = 0.0
        self._pauses = 0
        self._paused_at = 0.0
        self._lock = threading.Lock()
        #: Whether the deadline was found passed (sticky: the answer then says so).
        self.reached = False

    @classmethod
    def of_ms(cls, budget_ms: float) -> Deadline:
        """A deadline of ``budget_ms`` milliseconds from now."""
        return cls(budget_ms / 1000)

    def spent_s(self) -> float:
        """The part's own time so far (pauses excluded)."""
        with self._lock:
            now = self._paused_at if self._pauses else self._clock()
            return now - self._start - self._paused_s

    def remaining_s(self) -> float:
        """Seconds left before the stop (0 when passed)."""
        return max(0.0, self.seconds - self.spent_s())

    def expired(self) -> bool:
        """Whether the stop has passed (remembered in :attr:`reached`)."""
        if not self.reached and self.spent_s() > self.seconds:
            self.reached = True
        return self.reached

    def check(self) -> None:
        """Raise :class:`Expired` once the stop has passed."""
        if self.expired():
            raise Expired

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Charge nothing for the block: the Doctor waits for the server (its compile workers,
        its sandbox), whose own limits bound that work, and whose queue is load."""
        with self._lock:
            if not self._pauses:
                self._paused_at = self._clock()
            self._pauses += 1
        try:
            yield
        finally:
            with self._lock:
                self._pauses -= 1
                if not self._pauses:
                    self._paused_s += self._clock() - self._paused_at
