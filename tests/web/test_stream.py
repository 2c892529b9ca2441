"""The run stream over a real socket: reconnects resume with every index exactly once, a
reconnect after ``end`` starts nothing, and concurrent streams share forward passes."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from app.engine import Engine
from app.main import create_app
from app.settings import Settings
from app.web.runtime.state import AppState
from tests.conftest import served
from tests.polling import wait_until
from tests.web.conftest import session_body
from tests.web.sse import iter_events, parse_events


def _session(base: str, **overrides: object) -> str:
    response = httpx.post(f"{base}/api/sessions", json=session_body(**overrides), timeout=120)
    assert response.status_code == 200, response.text
    session_id: str = response.json()["id"]
    return session_id


def _steps(base: str, session_id: str) -> int:
    return len(httpx.get(f"{base}/api/sessions/{session_id}", timeout=60).json()["steps"])


@pytest.fixture(scope="module")
def live_app(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveApp]:
    """An app on the session's engine served by uvicorn, with its state at hand (the tests
    wait for its run flags, never for a fixed time)."""
    settings = Settings(db_path=tmp_path_factory.mktemp("stream") / "p.db")
    app = create_app(settings, engine=engine)
    with served(app) as url:
        yield LiveApp(app.state.maskscope, url)


@dataclass(frozen=True)
class LiveApp:
    state: AppState
    url: str


@pytest.mark.server
def test_a_stream_dropped_in_the_middle_of_a_step_resumes_with_every_index_once(
    live_app: LiveApp, engine: Engine
) -> None:
    total = 12
    session_id = _session(live_app.url, max_tokens=total)
    url = f"{live_app.url}/api/sessions/{session_id}/events?format=json"
    runs = live_app.state.sessions.get(session_id).runs
    seen: list[int] = []
    lock = engine.model.lock
    with httpx.stream("GET", url, timeout=120) as stream:
        for event in iter_events(stream.iter_lines()):
            if event["event"] == "step":
                seen.append(int(event["id"]))
            if len(seen) == 3:
                # The next forward pass waits for this lock: a step is in flight when the
                # connection drops, and still in flight when the client comes back.
                lock.__enter__()
                break
    try:
        answers: list[httpx.Response] = []
        headers = {"Last-Event-ID": str(seen[-1])}
        reconnect = threading.Thread(
            target=lambda: answers.append(httpx.get(url, headers=headers, timeout=300))
        )
        reconnect.start()
        # The reconnect's stream took the run over (the first run is number 1) while the
        # step is still in flight.
        wait_until(lambda: not runs.current(1), "the reconnect arrived")
    finally:
        lock.__exit__()
    reconnect.join(timeout=300)
    events = parse_events(answers[0].text)
    resumed = [int(e["id"]) for e in events if e["event"] == "step"]
    assert seen + resumed == list(range(total)), "every index once, in order"
    assert [(e["event"], e.get("id")) for e in events[len(resumed) :]] == [
        ("done", None),
        ("end", "end"),
    ]


@pytest.mark.server
def test_a_reconnect_after_end_gets_204_and_starts_nothing(live_app: LiveApp) -> None:
    live_server = live_app.url
    session_id = _session(live_server, max_tokens=400)
    handle = live_app.state.sessions.get(session_id)
    url = f"{live_server}/api/sessions/{session_id}/events?format=json"
    events: list[dict[str, str]] = []
    with httpx.stream("GET", url, timeout=120) as stream:
        for event in iter_events(stream.iter_lines()):
            events.append(event)
            if event["event"] == "step" and event["id"] == "1":
                paused = httpx.post(f"{live_server}/api/sessions/{session_id}/pause", timeout=60)
                assert paused.status_code == 200
    assert [e["event"] for e in events[-2:]] == ["paused", "end"]
    last_id = events[-1]["id"]  # what a browser's EventSource sends when it reconnects
    assert last_id == "end"
    wait_until(lambda: not handle.busy, "the paused run's loop left")
    steps = _steps(live_server, session_id)
    again = httpx.get(url, headers={"Last-Event-ID": last_id}, timeout=60)
    assert again.status_code == 204 and again.content == b""
    # A run starts in the answer's own stream (``runs.start``): a 204 has none to start.
    assert not handle.busy and not handle.runs.streaming, "the paused run did not start again"
    assert _steps(live_server, session_id) == steps


def test_a_reconnect_to_a_run_that_ended_gets_its_end_and_generates_nothing(
    live_server: str,
) -> None:
    session_id = _session(live_server, max_tokens=400)
    url = f"{live_server}/api/sessions/{session_id}/events?format=json"
    with httpx.stream("GET", url, timeout=120) as stream:
        for event in iter_events(stream.iter_lines()):
            if event["event"] == "step" and event["id"] == "1":
                httpx.post(f"{live_server}/api/sessions/{session_id}/pause", timeout=60)
    steps = _steps(live_server, session_id)
    # The connection dropped after step 1 was received, before the rest of the run arrived.
    body = httpx.get(url, headers={"Last-Event-ID": "1"}, timeout=60).text
    events = parse_events(body)
    assert [int(e["id"]) for e in events if e["event"] == "step"] == list(range(2, steps))
    assert [e["event"] for e in events if e["event"] != "step"] == ["paused", "end"]
    assert _steps(live_server, session_id) == steps


def _streamed(base: str, session_id: str) -> list[dict[str, Any]]:
    url = f"{base}/api/sessions/{session_id}/events?format=json"
    body = httpx.get(url, timeout=600).text
    return [json.loads(e["data"]) for e in parse_events(body) if e["event"] == "step"]


def _agree(alone: list[dict[str, Any]], batched: list[dict[str, Any]]) -> int:
    """How many steps agree; fails where they differ by more than float error (a token may
    differ only where the two best allowed logits are within 1e-2: batched products round
    differently)."""
    for index, (one, other) in enumerate(zip(alone, batched, strict=True)):
        assert other["bitmask"] == one["bitmask"], index
        mine = {t["token_id"]: t["logit"] for t in one["top"]}
        for top in other["top"]:
            if top["token_id"] in mine:
                assert top["logit"] == pytest.approx(mine[top["token_id"]], abs=1e-3), index
        if other["token_id"] != one["token_id"]:
            best = sorted((t["logit"] for t in one["top"] if t["allowed"]), reverse=True)
            assert best[0] - best[1] < 1e-2, f"step {index}: a token differs with a clear margin"
            return index
    return len(alone)


def test_concurrent_streams_share_forward_passes_and_send_what_one_stream_alone_sends(
    live_server: str, engine: Engine
) -> None:
    steps = 10
    alone = _streamed(live_server, _session(live_server, max_tokens=steps))
    assert len(alone) == steps
    counts = engine.model.batcher.counts
    before = (counts.batches, counts.rows, counts.prompts_reused)
    ids = [_session(live_server, max_tokens=steps) for _ in range(3)]
    streamed: dict[str, list[dict[str, Any]]] = {}
    threads = [
        threading.Thread(target=lambda i=i: streamed.update({i: _streamed(live_server, i)}))
        for i in ids
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert counts.prompts_reused - before[2] == 3, "each prompt was copied from the first's"
    assert counts.rows - before[1] > counts.batches - before[0], "the streams shared batches"
    agreed = [_agree(alone, streamed[i]) for i in ids]
    assert sum(agreed) >= 3 * (steps - 2), agreed
