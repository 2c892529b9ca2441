"""Limits that keep one server up for a team: compile bombs, session caps, memory, idling."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
from fastapi.testclient import TestClient

from app.engine import Engine
from app.engine.model import FairLock
from app.main import create_app
from app.settings import Settings
from tests.web.conftest import session_body

# xgrammar needs seconds for this pattern (about 3.5 s at 3000 repetitions on this machine).
BOMB = {"type": "string", "pattern": "^(ab|cd|ef){1,6000}$"}


def test_a_compile_bomb_is_too_complex_and_others_are_answered_meanwhile(engine: Engine) -> None:
    from app.engine import GrammarCompiler

    app = create_app(Settings(), engine=engine)
    shared = engine.compiler
    engine.compiler = GrammarCompiler(engine.model.tokens.info, workers=2, timeout_s=1.5)
    body = {"kind": "json_schema", "source": json.dumps(BOMB)}
    try:
        with TestClient(app) as client:
            answers: list[Any] = []
            bomb = threading.Thread(
                target=lambda: answers.append(client.post("/api/compile", json=body))
            )
            started = time.monotonic()
            bomb.start()
            time.sleep(0.2)
            assert client.get("/healthz").status_code == 200
            small = client.post("/api/compile", json={"kind": "regex", "source": "[0-9]+"})
            assert small.status_code == 200
            assert bomb.is_alive(), "the other requests were answered while the bomb compiled"
            bomb.join(timeout=60)
            error = answers[0].json()["error"]
            assert answers[0].status_code == 422 and error["code"] == "grammar_too_complex"
            assert error["message"] == "too complex: compiling took longer than the 1.5 s limit"
            assert time.monotonic() - started < 30
            again = client.post("/api/compile", json={"kind": "regex", "source": "[a-z]+"})
            assert again.status_code == 200  # the killed worker was replaced
    finally:
        engine.compiler.close()
        engine.compiler = shared


def test_a_full_session_cap_answers_429(engine: Engine) -> None:
    with TestClient(create_app(Settings(max_sessions=2), engine=engine)) as client:
        ids = [client.post("/api/sessions", json=session_body()).json()["id"] for _ in range(2)]
        store = client.app.state.maskscope.sessions  # type: ignore[attr-defined]
        for session_id in ids:
            store.get(session_id).streaming = True  # both are running a stream
        response = client.post("/api/sessions", json=session_body())
        assert response.status_code == 429
        assert response.json()["error"]["message"] == (
            "all 2 sessions are running; try again in a moment"
        )


def test_idle_sessions_expire(engine: Engine) -> None:
    with TestClient(create_app(Settings(session_ttl_s=0.3), engine=engine)) as client:
        session_id = client.post("/api/sessions", json=session_body()).json()["id"]
        assert client.get(f"/api/sessions/{session_id}").status_code == 200
        time.sleep(0.5)
        gone = client.get(f"/api/sessions/{session_id}")
        assert gone.status_code == 410 and "expired" in gone.json()["error"]["message"]


def test_the_kv_cache_budget_evicts_the_least_recently_used(engine: Engine) -> None:
    with TestClient(create_app(Settings(max_kv_mb=20), engine=engine)) as client:
        first = client.post("/api/sessions", json=session_body()).json()["id"]
        client.post(f"/api/sessions/{first}/step", json={"n": 5})  # ~15 MB of KV cache
        second = client.post("/api/sessions", json=session_body()).json()["id"]
        client.post(f"/api/sessions/{second}/step", json={"n": 5})
        evicted = client.post(f"/api/sessions/{first}/step", json={"n": 1})
        assert evicted.status_code == 410
        assert "evicted to free memory" in evicted.json()["error"]["message"]
        assert client.post(f"/api/sessions/{second}/step", json={"n": 1}).status_code == 200


def test_a_client_that_disconnects_stops_its_generation(live_server: str) -> None:
    created = httpx.post(f"{live_server}/api/sessions", json=session_body(max_tokens=400)).json()
    session_id = created["id"]
    with httpx.stream("GET", f"{live_server}/api/sessions/{session_id}/events?format=json",
                      timeout=60) as stream:  # fmt: skip
        seen = 0
        for line in stream.iter_lines():
            seen += line.startswith("event: step")
            if seen == 3:
                break
    time.sleep(1.0)
    steps = len(httpx.get(f"{live_server}/api/sessions/{session_id}").json()["steps"])
    time.sleep(1.0)
    assert len(httpx.get(f"{live_server}/api/sessions/{session_id}").json()["steps"]) == steps
    assert steps < 30, "generation stopped soon after the client left"


def test_requests_carry_ids(client: TestClient) -> None:
    given = client.get("/healthz", headers={"X-Request-ID": "abc-123"})
    assert given.headers["x-request-id"] == "abc-123"
    made = client.get("/healthz", headers={"X-Request-ID": "bad id with spaces"})
    assert len(made.headers["x-request-id"]) == 16


def test_the_model_lock_serves_in_arrival_order() -> None:
    lock = FairLock()
    order: list[int] = []
    lock.__enter__()
    threads = []

    def take(i: int) -> None:
        with lock:
            order.append(i)

    for i in range(5):
        thread = threading.Thread(target=take, args=(i,))
        thread.start()
        threads.append(thread)
        time.sleep(0.05)  # arrive in order
    lock.__exit__()
    for thread in threads:
        thread.join(timeout=5)
    assert order == [0, 1, 2, 3, 4]
