"""Idle workers handed to the requests waiting for one, in the order they came.

A ``queue.Queue`` of idle workers is not fair: the thread that puts a worker back can take it
again at once, before a waiter it woke runs. Two clients looping a request the workers answer in
a millisecond (a schema refused as it is parsed) kept a third client's compile waiting 20 s of
20 for either of two workers. Here a worker put back goes to the longest waiter first.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Generic, TypeVar

__all__ = ["FairHandoff"]

T = TypeVar("T")


class _Waiter(Generic[T]):
    def __init__(self) -> None:
        self.event = threading.Event()
        self.item: T | None = None


class FairHandoff(Generic[T]):
    """Items (idle workers) given to waiters first come, first served."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: deque[T] = deque()
        self._waiters: deque[_Waiter[T]] = deque()
        self._closed = False

    def put(self, item: T) -> None:
        """Give ``item`` to the longest waiter, or keep it for the next :meth:`get`."""
        with self._lock:
            if self._waiters:
                waiter = self._waiters.popleft()
                waiter.item = item
                waiter.event.set()
            else:
                self._items.append(item)

    def get(self) -> T | None:
        """An item, after every earlier caller got theirs; None once :meth:`close` is called."""
        with self._lock:
            if self._closed:
                return None
            if self._items:  # no waiter then: a put hands straight to waiters
                return self._items.popleft()
            waiter: _Waiter[T] = _Waiter()
            self._waiters.append(waiter)
        waiter.event.wait()
        return waiter.item

    @property
    def waiting(self) -> int:
        """How many callers of :meth:`get` wait now."""
        with self._lock:
            return len(self._waiters)

    def close(self) -> None:
        """Wake every waiter with None; later calls of :meth:`get` answer None at once."""
        with self._lock:
            self._closed = True
            waiters, self._waiters = list(self._waiters), deque()
            self._items.clear()
        for waiter in waiters:
            waiter.event.set()
