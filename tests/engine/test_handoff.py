"""Idle workers go to the longest waiter: a thread that puts one back cannot take it again
ahead of a request already waiting (two clients looping fast refusals starved a third)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from app.engine.handoff import FairHandoff


def _waiting(handoff: FairHandoff[str], count: int) -> None:
    while handoff.waiting < count:
        time.sleep(0.001)


def _in_thread(call: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=call)
    thread.start()
    return thread


def test_a_worker_put_back_goes_to_the_longest_waiter_first() -> None:
    handoff: FairHandoff[str] = FairHandoff()
    got: list[tuple[str, str | None]] = []
    first = _in_thread(lambda: got.append(("first", handoff.get())))
    _waiting(handoff, 1)
    second = _in_thread(lambda: got.append(("second", handoff.get())))
    _waiting(handoff, 2)
    handoff.put("a")
    first.join()
    handoff.put("b")
    second.join()
    assert got == [("first", "a"), ("second", "b")]


def test_who_puts_a_worker_back_waits_behind_a_request_already_waiting() -> None:
    handoff: FairHandoff[str] = FairHandoff()
    order: list[str] = []
    waiter = _in_thread(lambda: order.append(f"waiter got {handoff.get()}"))
    _waiting(handoff, 1)
    handoff.put("w")  # the looping client puts its worker back...
    taken = _in_thread(lambda: order.append(f"looper got {handoff.get()}"))  # ...and asks again
    waiter.join()
    _waiting(handoff, 1)  # the looper waits: the worker went to the earlier request
    assert order == ["waiter got w"]
    handoff.put("w")
    taken.join()
    assert order == ["waiter got w", "looper got w"]


def test_close_wakes_every_waiter_with_none() -> None:
    handoff: FairHandoff[str] = FairHandoff()
    got: list[str | None] = []
    waiters = [_in_thread(lambda: got.append(handoff.get())) for _ in range(3)]
    _waiting(handoff, 3)
    handoff.close()
    for waiter in waiters:
        waiter.join()
    assert got == [None, None, None] and handoff.get() is None
