"""Blocking work on pools of its own: a flood of slow compiles and sandbox runs never holds a step
back; past their queues they are refused (429)."""

from __future__ import annotations

import asyncio
import json
import queue
import threading
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import anyio
import pytest
from fastapi.testclient import TestClient

from app.engine import Engine, GrammarCompiler
from app.exceptions import CapacityExceeded
from app.main import create_app
from app.settings import Settings
from app.web.runtime.executors import WorkPool
from tests.asyncrun import until
from tests.web.conftest import session_body

T = TypeVar("T")


def _run(scenario: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on a thread of its own: the browser tests keep a loop running on this one."""
    with ThreadPoolExecutor(1) as runner:
        return runner.submit(asyncio.run, scenario).result(timeout=120)


def test_a_full_queue_is_refused_and_frees_as_jobs_end() -> None:
    pool = WorkPool("compile", threads=1, queue=1)
    gate = threading.Event()

    async def scenario() -> list[str]:
        held = [asyncio.create_task(pool.run(gate.wait, 10)) for _ in range(2)]
        await until(lambda: pool.pending == 2, "both jobs in the pool")
        with pytest.raises(CapacityExceeded) as refused:
            await pool.run(str, "never runs")
        assert refused.value.message == (
            "too many compiles at once (1 running, 1 waiting); try again in a moment"
        )
        gate.set()
        assert await asyncio.gather(*held) == [True, True]
        return [await pool.run(str, "admitted again")]

    try:
        assert _run(scenario()) == ["admitted again"]
        assert pool.pending == 0
    finally:
        pool.shutdown()


Started = Callable[[], bool]


async def _cancel_natively(call: Callable[[], Coroutine[Any, Any, None]], started: Started) -> None:
    task = asyncio.create_task(call())
    await until(started, "the job running")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def _cancel_through_anyio(
    call: Callable[[], Coroutine[Any, Any, None]], started: Started
) -> None:
    # How Starlette and sse-starlette stop the task of a client that left.
    async with anyio.create_task_group() as group:
        group.start_soon(call)
        await until(started, "the job running")
        group.cancel_scope.cancel()


@pytest.mark.parametrize("cancel", [_cancel_natively, _cancel_through_anyio])
def test_a_cancelled_caller_keeps_its_lock_until_the_thread_ends(
    cancel: Callable[[Callable[[], Coroutine[Any, Any, None]], Started], Coroutine[Any, Any, None]],
) -> None:
    pool = WorkPool("step", threads=1)
    gate = threading.Event()
    finished: list[float] = []

    def work() -> None:
        gate.wait(10)
        finished.append(time.monotonic())

    async def scenario() -> None:
        lock = asyncio.Lock()

        async def action() -> None:
            async with lock:
                await pool.run(work)

        threading.Timer(0.3, gate.set).start()
        await cancel(action, lambda: pool.running == 1)
        assert finished, "the cancellation waited for the thread"
        assert not lock.locked()

    try:
        _run(scenario())
    finally:
        pool.shutdown()


def test_a_cancelled_caller_takes_its_waiting_job_out_of_the_queue() -> None:
    pool = WorkPool("examination", threads=1, queue=4, queue_per_client=1)
    gate = threading.Event()
    ran: list[str] = []

    async def scenario() -> str:
        running = asyncio.create_task(pool.run(gate.wait, 10))
        waiting = asyncio.create_task(pool.run(ran.append, "withdrawn"))
        await until(lambda: pool.waiting == 1, "the second job waiting")
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(waiting, timeout=5)  # not after the running job
        assert pool.waiting == 0
        # The client's share of the queue is free again.
        admitted = asyncio.create_task(pool.run(str, "admitted"))
        await until(lambda: pool.waiting == 1, "the admitted job waiting")
        gate.set()
        assert await running
        return await admitted

    try:
        assert _run(scenario()) == "admitted"
        assert ran == []
        assert pool.pending == 0
    finally:
        pool.shutdown()


def test_a_job_is_counted_over_before_its_caller_has_the_answer() -> None:
    # One thread and no queue: the next job is refused while this one still counts as running.
    pool = WorkPool("compile", threads=1, queue=0)
    # The thread ends a job by telling the observer, then counting it over: a slow observer
    # holds the thread there, where a caller told too early would find its job running.
    pool.observer = lambda seconds, outcome: time.sleep(0.2)

    async def scenario() -> list[str]:
        answers = []
        for word in ("one", "two", "three"):
            answers.append(await pool.run(str, word))
            assert (pool.pending, pool.running) == (0, 0)
        return answers

    try:
        assert _run(scenario()) == ["one", "two", "three"]
    finally:
        pool.shutdown()


def _slow_schema(i: int) -> str:
    # xgrammar needs tens of seconds for this pattern here (3.5 s at 3000 repetitions when idle).
    return json.dumps({"type": "string", "pattern": f"^(ab|cd|ef){{1,{6000 + i}}}$"})


def _slow_pydantic(i: int) -> str:
    # 100 models of 14 fields, each built on the previous ones: about 2 s of pydantic in the
    # sandbox process when idle, more under load.
    lines = ["from typing import Optional, Union", "from pydantic import BaseModel"]
    for k in range(100):
        lines.append(f"class M{i}x{k}(BaseModel):")
        for f in range(14):
            kind = "int"
            if k:
                kind = f"Optional[list[dict[str, M{i}x{k - 1}]]]"
            if k > 1 and f % 2:
                kind = f"Union[M{i}x{k - 1}, M{i}x{k - 2}, None]"
            lines.append(f"    f{f}: {kind} = None")
    return "\n".join(lines)


def test_a_step_is_answered_while_slow_compiles_and_sandbox_runs_fill_their_queues(
    engine: Engine,
) -> None:
    timeout_s = 10.0
    settings = Settings(
        compile_workers=1, compile_timeout_s=timeout_s, sandbox_workers=1, queue_max=1
    )
    shared = engine.compiler
    engine.compiler = GrammarCompiler(engine.model.tokens.info, workers=1, timeout_s=timeout_s)
    answers: queue.Queue[tuple[str, Any, float]] = queue.Queue()
    try:
        with TestClient(create_app(settings, engine=engine)) as client:
            session_id = client.post("/api/sessions", json=session_body()).json()["id"]
            assert client.post(f"/api/sessions/{session_id}/step").status_code == 200

            def send(kind: str, source: str) -> None:
                body = {"kind": "json_schema" if kind == "compile" else "pydantic",
                        "source": source}  # fmt: skip
                answers.put((kind, client.post("/api/compile", json=body), time.monotonic()))

            flood = [("compile", _slow_schema(i)) for i in range(4)]
            flood += [("sandbox", _slow_pydantic(i)) for i in range(3)]
            threads = [threading.Thread(target=send, args=job) for job in flood]
            for thread in threads:
                thread.start()
            # One running and one waiting of each kind; the others are refused at once.
            refused = [answers.get(timeout=30) for _ in range(3)]
            assert sorted(kind for kind, _, _ in refused) == ["compile", "compile", "sandbox"]
            for _, answer, _ in refused:
                assert answer.status_code == 429, answer.text
                assert answer.json()["error"]["code"] == "capacity_exceeded"
                assert "(1 running, 1 waiting)" in answer.json()["error"]["message"]

            pools = client.app.state.maskscope.pools  # type: ignore[attr-defined]
            assert pools.compiles.pending == pools.sandbox.pending == 2
            step = client.post(f"/api/sessions/{session_id}/step")
            stepped_at = time.monotonic()
            assert step.status_code == 200 and step.json()["steps"][0]["index"] == 1

            for thread in threads:
                thread.join(timeout=180)
            rest = [answers.get_nowait() for _ in range(4)]
            compiles = [(answer, at) for kind, answer, at in rest if kind == "compile"]
            assert [a.json()["error"]["code"] for a, _ in compiles] == ["grammar_too_complex"] * 2
            first_compile_over = min(at for _, at in compiles)
            print(f"step answered {first_compile_over - stepped_at:.1f} s before the first "
                  f"slow compile ended ({timeout_s:g} s limit)")  # fmt: skip
            assert stepped_at < first_compile_over
    finally:
        engine.compiler.close()
        engine.compiler = shared
