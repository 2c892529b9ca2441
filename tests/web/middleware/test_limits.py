"""Limits that keep one server up for a team: compile bombs, session caps, memory, idling."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from app.engine import Engine
from app.engine.model.loading import FairLock
from app.main import create_app
from app.settings import Settings
from tests.conftest import served
from tests.polling import wait_until
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
            compiles = client.app.state.maskscope.pools.compiles  # type: ignore[attr-defined]
            bomb.start()
            wait_until(lambda: compiles.running == 1, "the bomb compiling")
            assert client.get("/healthz").status_code == 200
            small = client.post("/api/compile", json={"kind": "regex", "source": "[0-9]+"})
            assert small.status_code == 200
            assert bomb.is_alive(), "the other requests were answered while the bomb compiled"
            bomb.join(timeout=60)
            error = answers[0].json()["error"]
            assert answers[0].status_code == 422 and error["code"] == "grammar_too_complex"
            assert error["message"] == "too complex: compiling took longer than the 1.5 s limit"
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
            store.get(session_id).runs.start()  # both are running a stream
        response = client.post("/api/sessions", json=session_body())
        assert response.status_code == 429
        assert response.json()["error"]["message"] == (
            "all 2 sessions are busy; try again in a moment"
        )


def test_idle_sessions_expire(engine: Engine) -> None:
    with TestClient(create_app(Settings(session_ttl_s=0.3), engine=engine)) as client:
        session_id = client.post("/api/sessions", json=session_body()).json()["id"]
        assert client.get(f"/api/sessions/{session_id}").status_code == 200
        # The app's sweep (every ttl/2) expires it, 0.3 s idle on: polled on the live count, as
        # a request for the session would use it and keep it alive.
        sessions = client.app.state.maskscope.sessions  # type: ignore[attr-defined]
        wait_until(lambda: len(sessions) == 0, "the idle session expired")
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


@pytest.mark.server
def test_a_client_that_disconnects_stops_its_generation(engine: Engine, tmp_path: Path) -> None:
    app = create_app(Settings(db_path=tmp_path / "p.db"), engine=engine)
    with served(app) as base:
        created = httpx.post(f"{base}/api/sessions", json=session_body(max_tokens=400)).json()
        session_id = created["id"]
        with httpx.stream("GET", f"{base}/api/sessions/{session_id}/events?format=json",
                          timeout=60) as stream:  # fmt: skip
            seen = 0
            for line in stream.iter_lines():
                seen += line.startswith("event: step")
                if seen == 3:
                    break
        handle = app.state.maskscope.sessions.get(session_id)
        # The positive signal: the run loop has left and holds the session no more.
        wait_until(lambda: not handle.busy, "the run loop stopped")
        steps = len(httpx.get(f"{base}/api/sessions/{session_id}").json()["steps"])
        assert not handle.busy, "no run started again"
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


def test_the_largest_replay_answers_in_bounded_size_and_one_token_more_is_413(
    client: TestClient, engine: Engine
) -> None:
    cap = client.app.state.maskscope.settings.max_tokens_cap  # type: ignore[attr-defined]
    assert cap == 4096  # the default of MASKSCOPE_REPLAY_MAX_TOKENS too
    text = "a" + " hello" * (cap - 1)
    assert len(engine.model.tokens.encode(text)) == cap
    grammar = {"kind": "regex", "source": "[a-z ]+"}
    wanted = list(range(0, cap, cap // 64))
    answer = client.post("/api/replay", json={"grammar": grammar, "text": text,
                                              "bitmask_for": wanted})  # fmt: skip
    assert answer.status_code == 200, answer.text
    replayed = answer.json()
    assert replayed["accepted"] and replayed["complete"] and len(replayed["tokens"]) == cap
    assert [i for i, t in enumerate(replayed["tokens"]) if "bitmask" in t] == wanted
    size = len(answer.content)
    print(f"the largest replay ({cap} tokens, {len(wanted)} bitmasks) answers {size} bytes")
    # the bitmasks asked for, and a short line per token (its class counts included)
    assert size < 64 * 8192 + cap * 400
    over = client.post("/api/replay", json={"grammar": grammar, "text": text + " hello"})
    assert over.status_code == 413
    assert over.json()["error"] == {
        "message": f"the text is {cap + 1} tokens; a replay walks at most {cap}",
        "code": "too_large",
        "pointer": "/text",
    }


def test_a_session_in_a_long_step_is_not_evicted_by_new_sessions(engine: Engine) -> None:
    with TestClient(create_app(Settings(max_sessions=2), engine=engine)) as client:
        busy = client.post("/api/sessions", json=session_body()).json()["id"]
        handle = client.app.state.maskscope.sessions.get(busy)  # type: ignore[attr-defined]
        answers: list[Any] = []
        step = threading.Thread(
            target=lambda: answers.append(client.post(f"/api/sessions/{busy}/step", json={"n": 3}))
        )
        with engine.model.lock:  # the step waits for the model: a long step
            step.start()
            deadline = time.monotonic() + 60
            while not handle.lock.locked():
                assert time.monotonic() < deadline, "the step did not start"
                time.sleep(0.05)
            newer = [client.post("/api/sessions", json=session_body()) for _ in range(2)]
        step.join(timeout=120)
        assert [r.status_code for r in newer] == [200, 200]
        assert answers[0].status_code == 200 and len(answers[0].json()["steps"]) == 3
        assert client.get(f"/api/sessions/{busy}").status_code == 200
        evicted = client.get(f"/api/sessions/{newer[0].json()['id']}")
        assert evicted.status_code == 410 and "evicted" in evicted.json()["error"]["message"]


def test_the_messages_setting_is_read_and_enforced(engine: Engine) -> None:
    with TestClient(create_app(Settings(messages_max_bytes=600), engine=engine)) as client:
        assert client.post("/api/sessions", json=session_body()).status_code == 200
        long = session_body(messages=[{"role": "user", "content": "é" * 400}])
        refused = client.post("/api/sessions", json=long)
        assert refused.status_code == 422
        assert refused.json()["error"] == {
            "message": "the prompt is 800 bytes in total; the limit is 600",
            "code": "invalid_input",
            "pointer": "/messages",
        }
        raw = client.post("/api/sessions", json=session_body(messages=[], raw_prompt="x" * 601))
        assert raw.status_code == 422 and raw.json()["error"]["pointer"] == "/raw_prompt"
        shared = client.post("/api/permalinks", json={**long, "actions": []})
        assert shared.status_code == 422 and "the limit is 600" in shared.text


def test_routes_that_need_the_model_answer_503_at_once_while_it_loads(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded = threading.Event()

    def load(cls: type[Engine], settings: Settings) -> Engine:
        loaded.wait(120)  # a model that takes its time
        return engine

    monkeypatch.setattr(Engine, "load", classmethod(load))
    app = create_app(Settings())
    app.state.maskscope.owns_engine = False  # it will be the session's engine: not the app's
    with TestClient(app) as client:
        try:
            answers: list[Any] = []
            request = threading.Thread(
                target=lambda: answers.append(
                    client.post("/api/compile", json={"kind": "regex", "source": "[0-9]+"})
                )
            )
            request.start()
            request.join(timeout=30)
            assert answers, "the request waited for the model instead of answering"
            assert answers[0].status_code == 503
            assert answers[0].json()["error"] == {
                "message": "the model is loading; try again when /readyz says ready",
                "code": "not_ready",
            }
            assert client.post("/api/sessions", json=session_body()).status_code == 503
            assert client.get("/readyz").status_code == 503
            assert client.get("/").status_code == 200  # the page itself needs no model
        finally:
            loaded.set()  # before the app stops: it waits for the load
        deadline = time.monotonic() + 60
        while client.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        ready = client.post("/api/compile", json={"kind": "regex", "source": "[0-9]+"})
        assert ready.status_code == 200
