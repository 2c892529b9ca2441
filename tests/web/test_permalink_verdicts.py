"""A permalink's GET reads its tests' verdicts: they are judged in the background, never on the
request's path (issue 46: a slow grammar's tests cost 20 s on every GET).

The proof is no timing: the GETs answer while the replay pool's only thread is held by a job
the test controls (a judgement on the request's path would need that thread: with no queue it
is a 429), and the final verdicts come once the pool is free again.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.engine import Engine
from app.main import create_app
from app.settings import Settings
from app.web.runtime.executors import WorkPool
from app.web.schemas.bodies import PermalinkIn
from app.web.services.permalinks import snapshot_of_request
from tests.conftest import as_page
from tests.web.conftest import session_body

#: Compiles in milliseconds; each token then costs more as the text grows (issue 46).
SLOW_GRAMMAR = {"kind": "ebnf", "source": 'root ::= root root | "a"'}
SLOW_TEXT = "a" * 200
RECORDED = {"passed": True, "grammar": True, "schema": None}  # as the sharing server judged it
TESTS = [{"text": SLOW_TEXT, "expect": "pass", "recorded": RECORDED}]


def _app(engine: Engine, db: Path, **settings: Any) -> FastAPI:
    # One replay thread and no queue: a judgement while it is held is refused at once.
    return create_app(
        Settings(db_path=db, compile_workers=1, queue_max=0, **settings), engine=engine
    )


@contextmanager
def _client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app) as test_client:
        yield as_page(test_client)


def _until(condition: Callable[[], bool], what: str, timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"still not {what} after {timeout_s} s"
        time.sleep(0.05)


@contextmanager
def _held(pool: WorkPool) -> Iterator[None]:
    """Every thread of ``pool`` busy with a job of the test's until the block ends."""
    release = threading.Event()
    holders = [
        threading.Thread(target=lambda: asyncio.run(pool.run(release.wait)))
        for _ in range(pool.threads)
    ]
    for holder in holders:
        holder.start()
    try:
        _until(lambda: pool.running == pool.threads, "holding the pool")
        yield
    finally:
        release.set()
        for holder in holders:
            holder.join()


def _old_permalink(app: FastAPI, engine: Engine) -> str:
    """A permalink shared before verdicts were kept beside it (or copied from another store)."""
    body = PermalinkIn.model_validate({**session_body(grammar=SLOW_GRAMMAR), "actions": []})
    snapshot = snapshot_of_request(body, engine.model.identity, tests=TESTS)
    snapshot_id: str = app.state.maskscope.store.put(snapshot)[0]
    return snapshot_id


def _results(api: TestClient, snapshot_id: str) -> list[dict[str, Any]]:
    answer = api.get(f"/api/permalinks/{snapshot_id}")
    assert answer.status_code == 200, answer.text
    results: list[dict[str, Any]] = answer.json()["test_results"]
    return results


def _final(api: TestClient, snapshot_id: str) -> list[dict[str, Any]]:
    """The test results once no test is pending (a GET schedules the judgement if needed)."""
    found: list[dict[str, Any]] = []

    def judged() -> bool:
        found[:] = _results(api, snapshot_id)
        return not any(r["status"] == "pending" for r in found)

    _until(judged, "judged")
    return found


def test_a_get_answers_pending_without_judging_then_the_final_verdict(
    engine: Engine, tmp_path: Path
) -> None:
    app = _app(engine, tmp_path / "p.db")
    with _client(app) as api:
        snapshot_id = _old_permalink(app, engine)
        with _held(app.state.maskscope.pools.replays):
            assert _results(api, snapshot_id) == [
                {"text": SLOW_TEXT, "expect": "pass", "recorded": RECORDED, "status": "pending"}
            ]
            page = api.get(f"/s/{snapshot_id}")
            assert page.status_code == 200
            assert page.text.count('data-status="pending"') == 1  # the Tests panel, at once
        [result] = _final(api, snapshot_id)
        assert result["status"] == "judged" and result["passed"] is True
        assert result["grammar"] == {"accepted": True, "complete": True, "rejection": None}
        assert result["differs"] is False and result["recorded"] == RECORDED
        kept = app.state.maskscope.store.get_verdicts(snapshot_id)
        assert kept is not None and kept["results"][0]["passed"] is True
    # Another server process on the same file reads them: its only replay thread held all along.
    again = _app(engine, tmp_path / "p.db")
    with _client(again) as api, _held(again.state.maskscope.pools.replays):
        assert _results(api, snapshot_id) == [result]


def test_verdicts_kept_from_another_model_are_shown_pending_then_judged_again(
    engine: Engine, tmp_path: Path
) -> None:
    app = _app(engine, tmp_path / "p.db")
    with _client(app) as api:
        snapshot_id = _old_permalink(app, engine)
        elsewhere = _final(api, snapshot_id)[0]
        store = app.state.maskscope.store
        kept = store.get_verdicts(snapshot_id)
        # As another xgrammar version judged it here before: refused.
        kept["judged_with"]["xgrammar"] = "0.0.1"
        refused = {"accepted": False, "complete": False, "rejection": None}
        kept["results"][0].update(passed=False, grammar=refused)
        kept["results"][0]["verdicts"] = {"passed": False, "grammar": False, "schema": None}
        store.put_verdicts(snapshot_id, kept)
        with _held(app.state.maskscope.pools.replays):
            [pending] = _results(api, snapshot_id)
        assert pending["status"] == "pending"  # with the verdict kept, until judged here
        assert pending["passed"] is False and pending["differs"] is True
        [result] = _final(api, snapshot_id)
        assert result == elsewhere and result["passed"] is True


def test_a_shared_permalink_keeps_the_verdicts_its_share_judged(
    engine: Engine, tmp_path: Path
) -> None:
    app = _app(engine, tmp_path / "p.db")
    request = {**session_body(max_tokens=20), "actions": [{"op": "step", "n": 2}],
               "tests": [{"text": "not json", "expect": "fail"}]}  # fmt: skip
    with _client(app) as api:
        shared = api.post("/api/permalinks", json=request)
        assert shared.status_code == 201, shared.text
        with _held(app.state.maskscope.pools.replays):
            [result] = _results(api, shared.json()["id"])
        assert result["status"] == "judged" and result["passed"] is True
        assert result["recorded"] == {"passed": True, "grammar": False, "schema": False}


def test_a_walk_past_the_budget_is_kept_as_grammar_too_slow(engine: Engine, tmp_path: Path) -> None:
    app = _app(engine, tmp_path / "p.db", walk_budget_s=0.05)
    body = PermalinkIn.model_validate({**session_body(grammar=SLOW_GRAMMAR), "actions": []})
    tests = [{"text": "a" * 400, "expect": "pass", "recorded": RECORDED}]
    snapshot = snapshot_of_request(body, engine.model.identity, tests=tests)
    with _client(app) as api:
        snapshot_id = app.state.maskscope.store.put(snapshot)[0]
        [result] = _final(api, snapshot_id)
        assert result["status"] == "error", result
        assert result["error"]["code"] == "grammar_too_slow"
        assert "passed" not in result
        # Kept as such: a later GET reads it, nothing judged again.
        with _held(app.state.maskscope.pools.replays):
            assert _results(api, snapshot_id) == [result]


def test_sharing_a_test_that_walks_past_the_budget_is_refused_with_grammar_too_slow(
    engine: Engine, tmp_path: Path
) -> None:
    app = _app(engine, tmp_path / "p.db", walk_budget_s=0.05)
    request = {**session_body(grammar=SLOW_GRAMMAR), "actions": [],
               "tests": [{"text": "a" * 400, "expect": "pass"}]}  # fmt: skip
    with _client(app) as api:
        shared = api.post("/api/permalinks", json=request)
        assert shared.status_code == 422, shared.text
        assert shared.json()["error"]["code"] == "grammar_too_slow"
        assert list(app.state.maskscope.store.rows()) == []  # nothing stored
