"""The Doctor's wall-clock safety stop (``app.doctor.safety``), on a clock the test moves: it
counts the Doctor's own time only, and once passed it stays passed."""

from __future__ import annotations

import pytest

from app.doctor.safety import Deadline, Expired


class Clock:
    """A clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_it_passes_after_its_seconds_and_stays_passed() -> None:
    clock = Clock()
    deadline = Deadline(2.0, clock=clock)
    clock.now += 1.5
    assert not deadline.expired() and deadline.remaining_s() == pytest.approx(0.5)
    deadline.check()
    clock.now += 1.0
    assert deadline.expired() and deadline.reached
    with pytest.raises(Expired):
        deadline.check()
    clock.now -= 10  # a reading from before (another thread's): what was seen stays seen
    assert deadline.expired()


def test_time_waiting_for_the_server_is_not_counted() -> None:
    clock = Clock()
    deadline = Deadline(2.0, clock=clock)
    clock.now += 1.0
    with deadline.paused():
        clock.now += 50.0  # a compile queued behind other clients', a sandbox batch
        assert deadline.spent_s() == pytest.approx(1.0)
        with deadline.paused():  # two calls at once: still one pause
            clock.now += 5.0
        clock.now += 5.0
    assert deadline.spent_s() == pytest.approx(1.0) and not deadline.expired()
    clock.now += 1.5
    assert deadline.expired()


def test_of_ms_is_in_milliseconds() -> None:
    assert Deadline.of_ms(2500).seconds == 2.5
