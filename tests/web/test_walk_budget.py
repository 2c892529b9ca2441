"""Every walk of a matcher a request starts is bounded by ``MASKSCOPE_WALK_BUDGET_S`` (issue 46):
the replay, the schema tests, a session's step (and a streamed run), and another client's
replay is answered meanwhile. The real app in-process (and under uvicorn for two clients), the
real model, real xgrammar and llguidance; budgets set in Settings, never a timing assertion."""

from __future__ import annotations

import asyncio
import json
import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.engine import Engine, GrammarKind, GrammarSpec
from app.engine.budget import WalkBudget, installed
from app.main import create_app
from app.settings import Settings
from app.web.runtime.executors import WorkPool
from tests import asyncrun
from tests.conftest import as_page, served
from tests.web.sse import parse_events

HOSTILE = 'root ::= root root | "a"'
#: Hostile too, and never complete: a run goes on until a step runs out of its budget (each
#: token costs about the cube of the text's length); "b" keeps the next byte unforced.
UNENDING = 'root ::= s root\ns ::= s s s s | s s s | s s | "a" | "b"'
TEXT = "a" * 4000  # unbounded: days of CPU; a few hundred characters already take minutes
A, B = "127.0.0.2", "127.0.0.3"


def _settings(folder: Path, **values: Any) -> Settings:
    return Settings(db_path=folder / "permalinks.db", **values)


@pytest.fixture(scope="module")
def app(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> FastAPI:
    return create_app(_settings(tmp_path_factory.mktemp("walks"), walk_budget_s=0.3), engine=engine)


@pytest.fixture(scope="module")
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app) as test_client:
        yield as_page(test_client)


@pytest.fixture(scope="module")
def steps_client(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """A client of an app whose steps have a small budget: a run stops within a hundred."""
    settings = _settings(tmp_path_factory.mktemp("steps"), walk_budget_s=0.05)
    with TestClient(create_app(settings, engine=engine)) as test_client:
        yield as_page(test_client)


def _grammar(source: str, engine: str = "xgrammar") -> dict[str, Any]:
    return {"kind": "ebnf", "source": source, "engine": engine}


def _slow(answer: Any) -> dict[str, Any]:
    """The error of a 422 ``grammar_too_slow`` answer (an httpx or a TestClient response)."""
    assert answer.status_code == 422, answer.text[:300]
    error: dict[str, Any] = answer.json()["error"]
    assert error["code"] == "grammar_too_slow"
    return error


@pytest.mark.parametrize("library", ["xgrammar", "llguidance"])
def test_a_hostile_replay_answers_grammar_too_slow(
    client: TestClient, engine: Engine, library: str
) -> None:
    total = len(engine.model.tokens.encode(TEXT))
    answer = client.post("/api/replay", json={"grammar": _grammar(HOSTILE, library), "text": TEXT})
    message = _slow(answer)["message"]
    assert message.startswith(
        "the replay ran past its CPU-time budget of 0.3 s (MASKSCOPE_WALK_BUDGET_S) after "
    )
    walked = int(message.split(" after ")[1].split(" of ")[0])
    assert 0 < walked < total and f"{walked} of {total} tokens walked (" in message
    assert "ms a token" in message
    # The budget is the request's: the same grammar on a short text is answered.
    short = client.post("/api/replay", json={"grammar": _grammar(HOSTILE, library), "text": "aa"})
    assert short.status_code == 200 and short.json()["accepted"] is True


def test_hostile_schema_tests_answer_grammar_too_slow_naming_the_test(client: TestClient) -> None:
    tests = [{"text": "a", "expect": "pass"}, {"text": TEXT, "expect": "pass"}]
    answer = client.post("/api/tests", json={"grammar": _grammar(HOSTILE), "tests": tests})
    error = _slow(answer)
    assert error["pointer"] == "/tests/1/text"
    assert error["message"].startswith("test 1: the schema tests ran past its CPU-time budget")


def _hostile_session(client: TestClient) -> str:
    body = {"grammar": _grammar(UNENDING), "raw_prompt": "a" * 200, "max_tokens": 2000}
    answer = client.post("/api/sessions", json=body)
    assert answer.status_code == 200, answer.text
    return str(answer.json()["id"])


def test_a_session_step_past_the_budget_is_422_and_the_session_stays_usable(
    steps_client: TestClient, engine: Engine
) -> None:
    client = steps_client
    session = _hostile_session(client)
    (aaaa,) = engine.model.tokens.encode("aaaa")
    forced = 0
    while (
        answer := client.post(f"/api/sessions/{session}/force", json={"token_id": aaaa})
    ).status_code == 200 and forced < 2000:
        forced += 1
    message = _slow(answer)["message"]
    assert message.startswith(
        "this step of the session ran past its CPU-time budget of 0.05 s "
        f"(MASKSCOPE_WALK_BUDGET_S) after {forced} tokens of output:"
    )
    # The step failed whole: the session holds the steps before it, and goes on from there.
    state = client.get(f"/api/sessions/{session}").json()
    assert len(state["steps"]) == forced and state["text"] == "aaaa" * forced
    assert client.post(f"/api/sessions/{session}/back", json={"n": forced - 1}).status_code == 200
    again = client.post(f"/api/sessions/{session}/force", json={"token_id": aaaa})
    assert again.status_code == 200 and again.json()["steps"][0]["index"] == 1


def test_a_streamed_run_stops_with_the_error_event(steps_client: TestClient) -> None:
    client = steps_client
    session = _hostile_session(client)
    with client.stream("GET", f"/api/sessions/{session}/events?format=json") as stream:
        body = "".join(stream.iter_text())
    events = parse_events(body)
    names = [e["event"] for e in events]
    assert names[-2:] == ["failed", "end"] and set(names[:-2]) == {"step"}, names
    error = json.loads(events[-2]["data"])["error"]
    assert error["code"] == "grammar_too_slow"
    steps = len(names) - 2
    assert f"after {steps} tokens of output" in error["message"]
    # The run is over, the session as it was after its last step sent, not done.
    state = client.get(f"/api/sessions/{session}").json()
    assert len(state["steps"]) == steps and state["done"] is False


def test_a_cancelled_request_cancels_its_walk_at_the_next_token(engine: Engine) -> None:
    """The pool cancels the budget of a caller cancelled while its walk runs (the stream's
    client left): the thread stops at its next token instead of walking on for nobody."""
    grammar = engine.compile(GrammarSpec(GrammarKind.EBNF, HOSTILE))
    pool = WorkPool("replay", threads=1)
    budget = WalkBudget(None, what="the replay")  # no CPU limit: only the cancel stops it

    def walk() -> None:
        with budget.running():
            engine.replay(grammar, text=TEXT)

    async def scenario() -> None:
        with installed(budget):
            job = asyncio.ensure_future(pool.run(walk))
        while budget.done < 20:  # walking, well past its start
            await asyncio.sleep(0.01)
        job.cancel()
        with pytest.raises(asyncio.CancelledError):
            await job  # returns once the thread is done: at its next token

    try:
        asyncrun.run(scenario())
    finally:
        pool.shutdown()
    assert budget.cancelled.is_set()
    assert pool.running == 0 and 20 <= budget.done < 1000


@pytest.mark.server  # the app under uvicorn (tests/conftest.py served)
def test_another_clients_replay_is_answered_while_hostile_ones_run(
    engine: Engine, tmp_path: Path
) -> None:
    # Two replay threads (the compile workers'): two hostile replays hold both.
    app = create_app(_settings(tmp_path, walk_budget_s=1.0, compile_workers=2), engine=engine)
    hostile = {"grammar": _grammar(HOSTILE), "text": "a" * 600}
    plain = {"grammar": _grammar('root ::= "yes" | "no"'), "text": "yes"}
    answers: queue.Queue[httpx.Response] = queue.Queue()
    with served(app) as url:
        pools = app.state.maskscope.pools

        def send(address: str, body: dict[str, Any]) -> httpx.Response:
            transport = httpx.HTTPTransport(local_address=address)
            with httpx.Client(base_url=url, timeout=600, transport=transport) as http:
                return http.post("/api/replay", json=body)

        flood = [threading.Thread(target=lambda: answers.put(send(A, hostile))) for _ in range(2)]
        for thread in flood:
            thread.start()
        while pools.replays.running < 2 and answers.empty():  # both threads hold one
            threading.Event().wait(0.01)
        theirs = send(B, plain)
        for thread in flood:
            thread.join(timeout=600)
    assert theirs.status_code == 200, theirs.text
    assert theirs.json()["accepted"] is True and theirs.json()["complete"] is True
    # The hostile ones ended at their budget, which is what freed a thread for B.
    assert [_slow(answers.get_nowait())["code"] for _ in range(2)] == ["grammar_too_slow"] * 2
