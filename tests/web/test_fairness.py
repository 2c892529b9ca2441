"""One client cannot deny others: sessions and queues are shared fairly between client addresses.

The server tests run the real app under uvicorn and reach it from distinct loopback addresses
(127.0.0.2, 127.0.0.3...), so each client is told apart by its real peer address.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

import httpx
import pytest
from fastapi.testclient import TestClient

from app.engine import Engine
from app.exceptions import CapacityExceeded
from app.main import create_app
from app.settings import Settings
from app.web.middleware.clients import acting_for
from app.web.runtime.executors import WorkPool
from tests.conftest import served
from tests.web.conftest import session_body
from tests.web.runtime.test_executors import _slow_pydantic

T = TypeVar("T")
A, B, C, D = "127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"


def _run(scenario: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on a thread of its own: the browser tests keep a loop running on this one."""
    with ThreadPoolExecutor(1) as runner:
        return runner.submit(asyncio.run, scenario).result(timeout=120)


async def _until(condition: Any) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, "the jobs did not reach the pool"
        await asyncio.sleep(0.01)


def test_a_second_clients_job_runs_before_the_first_clients_queue() -> None:
    pool = WorkPool("sandbox run", threads=1, queue=8, queue_per_client=8)
    gate = threading.Event()
    order: list[str] = []

    def job(name: str) -> None:
        gate.wait(30)
        order.append(name)

    async def scenario() -> None:
        tasks = []
        with acting_for("10.0.0.1"):
            tasks += [asyncio.create_task(pool.run(job, f"a{i}")) for i in range(4)]
        await _until(lambda: pool.pending == 4)
        with acting_for("10.0.0.2"):
            tasks.append(asyncio.create_task(pool.run(job, "b0")))
        await _until(lambda: pool.pending == 5)
        gate.set()
        await asyncio.gather(*tasks)

    try:
        _run(scenario())
    finally:
        pool.shutdown()
    # a0 was running; b0 is served before a1, a2, a3, which were waiting when it came.
    assert order == ["a0", "b0", "a1", "a2", "a3"]


def test_a_freed_thread_serves_the_client_with_the_fewest_jobs_running() -> None:
    pool = WorkPool("replay", threads=2, queue=8, queue_per_client=8)
    gates = {name: threading.Event() for name in ("a0", "a1", "a2", "b0", "b1")}
    started: list[str] = []

    def job(name: str) -> None:
        started.append(name)
        gates[name].wait(30)

    async def scenario() -> None:
        with acting_for("10.0.0.1"):
            tasks = [asyncio.create_task(pool.run(job, f"a{i}")) for i in range(3)]
        await _until(lambda: pool.pending == 3)
        with acting_for("10.0.0.2"):
            tasks += [asyncio.create_task(pool.run(job, f"b{i}")) for i in range(2)]
        await _until(lambda: pool.pending == 5)
        gates["a0"].set()  # A keeps a1 running: the thread goes to B, which has none
        await _until(lambda: len(started) == 3)
        gates["a1"].set()  # now A has none running and B one: A's turn
        await _until(lambda: len(started) == 4)
        for gate in gates.values():
            gate.set()
        await asyncio.gather(*tasks)

    try:
        _run(scenario())
    finally:
        pool.shutdown()
    assert started == ["a0", "a1", "b0", "a2", "b1"]


def test_one_client_may_keep_only_its_share_of_the_queue_waiting() -> None:
    pool = WorkPool("sandbox run", threads=1, queue=4, queue_per_client=2)
    gate = threading.Event()

    async def scenario() -> list[bool]:
        with acting_for("10.0.0.1"):
            held = [asyncio.create_task(pool.run(gate.wait, 30)) for _ in range(3)]
            await _until(lambda: pool.pending == 3)
            with pytest.raises(CapacityExceeded) as mine:
                await pool.run(str, "never runs")
        assert mine.value.message == (
            "too many sandbox runs at once from 10.0.0.1: 2 of yours wait already (at most 2 "
            "per client); try again when one is done"
        )
        for client in ("10.0.0.2", "10.0.0.3"):
            with acting_for(client):
                held.append(asyncio.create_task(pool.run(gate.wait, 30)))
        await _until(lambda: pool.pending == 5)
        with acting_for("10.0.0.4"), pytest.raises(CapacityExceeded) as full:
            await pool.run(str, "never runs")
        assert full.value.message == (
            "too many sandbox runs at once (1 running, 4 waiting); try again in a moment"
        )
        gate.set()
        return list(await asyncio.gather(*held))

    try:
        assert _run(scenario()) == [True] * 5
        assert pool.pending == 0
    finally:
        pool.shutdown()


@contextmanager
def _clients(url: str, *addresses: str) -> Iterator[list[httpx.Client]]:
    """One HTTP client per loopback address, each connecting from it."""
    clients = [
        httpx.Client(
            base_url=url, timeout=120, transport=httpx.HTTPTransport(local_address=address)
        )
        for address in addresses
    ]
    try:
        yield clients
    finally:
        for client in clients:
            client.close()


def _open(client: httpx.Client) -> str:
    answer = client.post("/api/sessions", json=session_body())
    assert answer.status_code == 200, answer.text
    return str(answer.json()["id"])


@pytest.mark.server  # the app under uvicorn (tests/conftest.py served)
def test_many_sessions_from_one_client_never_evict_anothers(engine: Engine) -> None:
    app = create_app(Settings(), engine=engine)  # 32 sessions, 8 per client
    with served(app) as url, _clients(url, A, B) as (a, b):
        theirs = _open(b)
        mine = [_open(a) for _ in range(33)]
        assert b.get(f"/api/sessions/{theirs}").status_code == 200
        assert [a.get(f"/api/sessions/{i}").status_code for i in mine[-8:]] == [200] * 8
        gone = a.get(f"/api/sessions/{mine[0]}")
        assert gone.status_code == 410
        assert gone.json()["error"]["message"] == (
            f"session {mine[0]} was evicted to make room for a newer session of the same "
            "client; start a new one"
        )
        assert app.state.maskscope.sessions.held_by(A) == 8


@pytest.mark.server  # the app under uvicorn (tests/conftest.py served)
def test_a_client_at_its_cap_loses_its_own_oldest_idle_session_or_is_refused(
    engine: Engine,
) -> None:
    app = create_app(Settings(max_sessions_per_client=2), engine=engine)
    with served(app) as url, _clients(url, A, B) as (a, b):
        first, second, third = (_open(a) for _ in range(3))
        assert a.get(f"/api/sessions/{first}").status_code == 410
        assert [a.get(f"/api/sessions/{i}").status_code for i in (second, third)] == [200, 200]
        store = app.state.maskscope.sessions
        for session_id in (second, third):
            store.get(session_id).runs.start()  # both are running a stream
        refused = a.post("/api/sessions", json=session_body())
        assert refused.status_code == 429
        assert refused.json()["error"] == {
            "message": f"all 2 sessions of {A} are busy (a client holds at most 2); try again "
            "in a moment",
            "code": "capacity_exceeded",
        }
        _open(b)  # another client is not held to A's cap


@pytest.mark.server  # the app under uvicorn (tests/conftest.py served)
def test_a_full_server_makes_room_only_from_a_client_past_its_fair_share(
    engine: Engine,
) -> None:
    app = create_app(Settings(max_sessions=4, max_sessions_per_client=4), engine=engine)
    with served(app) as url, _clients(url, A, B, C, D) as (a, b, c, d):
        mine = [_open(a) for _ in range(3)]
        theirs = _open(b)
        newcomer = _open(c)  # full: three clients, a share of 1 each; A holds 3
        assert a.get(f"/api/sessions/{mine[0]}").status_code == 410
        assert b.get(f"/api/sessions/{theirs}").status_code == 200
        store = app.state.maskscope.sessions
        for session_id in mine[1:]:
            store.get(session_id).runs.start()
        # Four clients, a share of 1: only A is past it, and its sessions are busy.
        refused = d.post("/api/sessions", json=session_body())
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["message"] == (
            "all 4 sessions are busy or held by clients within their fair share (1 each); "
            "try again later"
        )
        assert b.get(f"/api/sessions/{theirs}").status_code == 200
        assert c.get(f"/api/sessions/{newcomer}").status_code == 200


@pytest.mark.server  # the app under uvicorn (tests/conftest.py served)
def test_the_memory_budget_evicts_the_heaviest_clients_session_first(engine: Engine) -> None:
    # A stepped session holds about 18 MB here (its prompt's KV cache, room to grow included):
    # 40 MB holds two.
    app = create_app(Settings(max_kv_mb=40), engine=engine)
    with served(app) as url, _clients(url, A, B) as (a, b):
        theirs = _open(b)
        assert b.post(f"/api/sessions/{theirs}/step").status_code == 200
        mine = [_open(a), _open(a)]
        for session_id in mine:
            assert a.post(f"/api/sessions/{session_id}/step").status_code == 200
        # B's session is the least recently used, but A's sessions hold the most memory.
        evicted = a.get(f"/api/sessions/{mine[0]}")
        assert evicted.status_code == 410, evicted.text
        assert "evicted to free memory" in evicted.json()["error"]["message"]
        assert b.get(f"/api/sessions/{theirs}").status_code == 200
        assert a.get(f"/api/sessions/{mine[1]}").status_code == 200


@pytest.mark.server  # the app under uvicorn (tests/conftest.py served)
def test_slow_pydantic_sources_from_one_client_neither_refuse_nor_delay_anothers(
    engine: Engine,
) -> None:
    settings = Settings(sandbox_workers=1, queue_max=4, queue_max_per_client=2)
    app = create_app(settings, engine=engine)
    answers: queue.Queue[tuple[str, httpx.Response]] = queue.Queue()
    with served(app) as url, _clients(url, A, B) as (a, b):

        def send(client: httpx.Client, name: str, source: str, root: str | None) -> None:
            body = {"kind": "pydantic", "source": source, "options": {"root_model": root}}
            answers.put((name, client.post("/api/compile", json=body)))

        # Seconds of pydantic each, then an error straight from the sandbox (no compile after).
        flood = [
            threading.Thread(target=send, args=(a, f"a{i}", _slow_pydantic(i), "Missing"))
            for i in range(5)
        ]
        for thread in flood:
            thread.start()
        refused = [answers.get(timeout=60) for _ in range(2)]
        for _, answer in refused:
            assert answer.status_code == 429, answer.text
            assert answer.json()["error"]["message"] == (
                f"too many sandbox runs at once from {A}: 2 of yours wait already (at most 2 "
                "per client); try again when one is done"
            )
        done_before = answers.qsize()
        theirs = "from pydantic import BaseModel\nclass Point(BaseModel):\n    x: int\n"
        send(b, "b", theirs, None)
        for thread in flood:
            thread.join(timeout=180)
        order = [answers.get_nowait() for _ in range(4)]
    names = [name for name, _ in order]
    by_name = dict(order)
    assert by_name["b"].status_code == 200, by_name["b"].text
    assert by_name["b"].json()["json_schema"]["title"] == "Point"
    for name, answer in order:
        if name != "b":
            assert answer.status_code == 422, answer.text
            assert "no model named 'Missing'" in answer.json()["error"]["message"]
    # A's job running when B's came ends first; then B's, before A's that were waiting.
    assert names.index("b") == done_before + 1, names


@pytest.mark.server  # the app under uvicorn (tests/conftest.py served)
def test_twenty_slow_pydantic_sources_from_one_client_leave_another_room(engine: Engine) -> None:
    app = create_app(Settings(), engine=engine)  # 4 sandbox processes, 16 waiting, 4 per client
    answers: queue.Queue[httpx.Response] = queue.Queue()
    with served(app) as url, _clients(url, A, B) as (a, b):

        def send(i: int) -> None:
            body = {"kind": "pydantic", "source": _slow_pydantic(i),
                    "options": {"root_model": "Missing"}}  # fmt: skip
            answers.put(a.post("/api/compile", json=body))

        flood = [threading.Thread(target=send, args=(i,)) for i in range(20)]
        for thread in flood:
            thread.start()
        refused = [answers.get(timeout=60) for _ in range(12)]  # 4 running, 4 waiting
        assert [r.status_code for r in refused] == [429] * 12, [r.text for r in refused]
        body = {"kind": "pydantic", "source": "from pydantic import BaseModel\n"
                "class Point(BaseModel):\n    x: int\n"}  # fmt: skip
        theirs = b.post("/api/compile", json=body)
        assert theirs.status_code == 200, theirs.text
        assert theirs.json()["models"] == ["Point"]
        for thread in flood:
            thread.join(timeout=180)
    admitted = [answers.get_nowait() for _ in range(8)]
    assert [r.json()["error"]["code"] for r in admitted] == ["pydantic_error"] * 8


def test_the_client_is_the_address_a_middleware_outside_rewrote(engine: Engine) -> None:
    # What the trusted-proxy handling does with X-Forwarded-For: the caps follow its address.
    app = create_app(Settings(), engine=engine)

    class Forwarded:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                scope["client"] = ("203.0.113.9", 4000)
            await self.inner(scope, receive, send)

    app.add_middleware(Forwarded)
    with TestClient(app, client=("10.0.0.1", 123)) as client:
        assert client.post("/api/sessions", json=session_body()).status_code == 200
    store = app.state.maskscope.sessions
    assert (store.held_by("203.0.113.9"), store.held_by("10.0.0.1")) == (1, 0)
