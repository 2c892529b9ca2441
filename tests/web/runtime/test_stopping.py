"""The stop's parts, alone: a pool stopped refuses new work and fails what waited, with 503
``shutting_down``; the stop's hooks run once, in order, past a failing one."""

from __future__ import annotations

import asyncio
import threading

import pytest

from app.exceptions import CapacityExceeded, ShuttingDown
from app.web.errors import status_of
from app.web.runtime.executors import WorkPool
from app.web.runtime.stopping import Shutdown
from tests.asyncrun import until
from tests.web.runtime.test_executors import _run


def test_a_stopped_pool_fails_what_waited_and_refuses_new_work() -> None:
    pool = WorkPool("compile", threads=1, queue=2)
    gate = threading.Event()
    outcomes: list[str] = []
    pool.observer = lambda seconds, outcome: outcomes.append(outcome)

    async def scenario() -> tuple[bool | BaseException, str | BaseException]:
        running = asyncio.create_task(pool.run(gate.wait, 10))
        waiting = asyncio.create_task(pool.run(str, "never runs"))
        await until(lambda: (pool.running, pool.waiting) == (1, 1), "one running, one waiting")
        pool.shutdown()
        with pytest.raises(ShuttingDown) as refused:
            await pool.run(str, "too late")
        assert "the server is shutting down" in refused.value.message
        gate.set()
        return await asyncio.gather(running, waiting, return_exceptions=True)

    ran, dropped = _run(scenario())
    assert ran is True  # what ran finishes on its own
    assert isinstance(dropped, ShuttingDown) and "did not start" in dropped.message
    assert status_of(dropped) == 503 and dropped.code == "shutting_down"
    assert outcomes.count("refused") == 1 and "ok" in outcomes


def test_a_job_that_fails_once_the_pool_stopped_fails_as_shutting_down() -> None:
    pool = WorkPool("compile", threads=1)
    gate = threading.Event()

    def killed() -> None:  # a compile whose worker process the stop killed
        gate.wait(10)
        raise CapacityExceeded("its worker died")

    async def scenario() -> BaseException | None:
        job = asyncio.create_task(pool.run(killed))
        await until(lambda: pool.running == 1, "the job running")
        pool.shutdown()
        gate.set()
        return (await asyncio.gather(job, return_exceptions=True))[0]

    error = _run(scenario())
    assert isinstance(error, ShuttingDown) and "was cancelled" in error.message


def test_the_hooks_run_once_in_order_past_a_failing_one() -> None:
    stop = Shutdown()
    ran: list[str] = []

    def failing() -> None:
        ran.append("failing")
        raise RuntimeError("boom")

    stop.add_hook("first", lambda: ran.append("first"))
    stop.add_hook("failing", failing)
    stop.add_hook("last", lambda: ran.append("last"))
    assert not stop.started
    stop.begin()
    stop.begin()
    assert stop.started and ran == ["first", "failing", "last"]
