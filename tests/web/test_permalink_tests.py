"""Schema unit tests kept in permalinks, and old permalinks keeping their ids."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.engine import Engine
from app.engine.model.loading import ModelIdentity
from app.main import create_app
from app.settings import Settings
from app.store.permalinks import canonical_id, canonical_json
from app.store.snapshot_format import V1_FIELDS
from app.web.schemas.bodies import PermalinkIn
from app.web.services.permalinks import _DEFAULTS, snapshot_of_request
from tests.conftest import as_page
from tests.web.conftest import session_body

OLD = json.loads((Path(__file__).parent.parent / "fixtures" / "permalink-v1.json").read_text())
TESTS = [
    {"text": '{"id": 42, "profile": {"display_name": "Ada"}}', "expect": "fail"},
    {"text": "not json", "expect": "pass"},
]


@pytest.fixture(scope="module")
def shared_app(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> FastAPI:
    db_path = tmp_path_factory.mktemp("permalink-tests") / "permalinks.db"
    return create_app(Settings(db_path=db_path), engine=engine)


@pytest.fixture(scope="module")
def api(shared_app: FastAPI) -> Iterator[TestClient]:
    with TestClient(shared_app) as test_client:
        yield as_page(test_client)


def test_an_old_permalink_keeps_its_id() -> None:
    identity = ModelIdentity(**OLD["identity"])
    snapshot = snapshot_of_request(PermalinkIn.model_validate(OLD["request"]), identity)
    assert snapshot == OLD["snapshot"]
    assert canonical_id(canonical_json(snapshot)) == OLD["id"]


def _paths(value: Any, at: str = "") -> set[str]:
    if isinstance(value, dict):
        return {p for k, v in value.items() for p in {f"{at}{k}"} | _paths(v, f"{at}{k}.")}
    if isinstance(value, list):
        return {p for item in value for p in _paths(item, f"{at[:-1]}[].")}
    return set()


def test_every_field_written_is_of_version_1_or_has_a_default() -> None:
    body = {**OLD["request"], "raw_prompt": "x", "tests": TESTS}
    identity = ModelIdentity(**OLD["identity"])
    recorded = [{**t, "recorded": {}} for t in TESTS]
    snapshot = snapshot_of_request(PermalinkIn.model_validate(body), identity, tests=recorded)
    unruled = {p for p in _paths(snapshot) if p not in V1_FIELDS and p not in _DEFAULTS}
    assert unruled == {"tests[].text", "tests[].expect", "tests[].recorded"}


def test_an_old_permalink_opens_with_no_tests(api: TestClient, shared_app: FastAPI) -> None:
    snapshot_id, _ = shared_app.state.maskscope.store.put(OLD["snapshot"])
    assert snapshot_id == OLD["id"]
    body = api.get(f"/api/permalinks/{snapshot_id}").json()
    assert body["tests"] == [] and body["test_results"] == []
    assert body["request"] == OLD["snapshot"]["request"]


def test_a_permalink_round_trip_restores_the_tests_and_their_verdicts(api: TestClient) -> None:
    request = {**session_body(max_tokens=20), "actions": [{"op": "step", "n": 2}]}
    without = api.post("/api/permalinks", json=request).json()["id"]
    again = api.post("/api/permalinks", json={**request, "tests": []}).json()["id"]
    assert again == without  # no tests: the same content, the same id
    created = api.post("/api/permalinks", json={**request, "tests": TESTS})
    assert created.status_code == 201 and created.json()["id"] != without
    body = api.get(f"/api/permalinks/{created.json()['id']}").json()
    assert [{"text": t["text"], "expect": t["expect"]} for t in body["tests"]] == TESTS
    assert body["tests"][0]["recorded"] == {"passed": True, "grammar": False, "schema": False}
    assert body["tests"][1]["recorded"] == {"passed": False, "grammar": False, "schema": False}
    results = body["test_results"]
    assert [r["passed"] for r in results] == [True, False]
    assert [r["differs"] for r in results] == [False, False]
    assert results[0]["text"] == TESTS[0]["text"] and results[0]["expect"] == "fail"
    page = api.get(created.json()["url"]).text
    assert 'id="shared-tests"' in page and "display_name" in page


def test_a_verdict_unlike_the_recorded_one_is_flagged(api: TestClient, shared_app: FastAPI) -> None:
    request = {**session_body(max_tokens=20), "tests": TESTS[:1]}
    snapshot_id = api.post("/api/permalinks", json=request).json()["id"]
    stored, _ = shared_app.state.maskscope.store.get(snapshot_id)
    stored["tests"][0]["recorded"]["grammar"] = True  # as another server judged it
    other_id, _ = shared_app.state.maskscope.store.put(stored)
    # Never judged here yet: pending, and judged in the background (a bounded poll).
    for _ in range(2000):
        [result] = api.get(f"/api/permalinks/{other_id}").json()["test_results"]
        if result["status"] != "pending":
            break
        time.sleep(0.05)
    assert result["differs"] is True and result["recorded"]["grammar"] is True


def test_the_page_shares_the_tests_it_sends(api: TestClient) -> None:
    session_id = api.post("/api/sessions", json=session_body(max_tokens=5)).json()["id"]
    api.post(f"/api/sessions/{session_id}/step", json={"n": 1})
    html = api.post(f"/ui/sessions/{session_id}/share", data={"tests": json.dumps(TESTS)},
                    headers={"HX-Request": "true"}).text  # fmt: skip
    snapshot_id = html.split('href="/s/')[1].split('"')[0]
    body = api.get(f"/api/permalinks/{snapshot_id}").json()
    assert [t["expect"] for t in body["tests"]] == ["fail", "pass"]
    bad = api.post(f"/ui/sessions/{session_id}/share", data={"tests": "[{"})
    assert bad.status_code == 422 and bad.json()["error"]["pointer"] == "/tests"


def test_the_tests_panel_renders_the_verdicts_and_flags_a_changed_one(api: TestClient) -> None:
    form = {"kind": "json_schema", "source": '{"type": "array", "uniqueItems": true}',
            "tests": json.dumps([
                {"text": "[1,1]", "expect": "fail"},
                {"text": "[1, 2]", "expect": "pass",
                 "recorded": {"passed": False, "grammar": False, "schema": True}},
            ])}  # fmt: skip
    html = api.post("/ui/tests", data=form, headers={"HX-Request": "true"}).text
    assert 'data-failed="1"' in html and html.count('class="test-row') == 2
    assert "disagree" in html and "differs from shared" in html
    assert 'data-judged="[1, 1]"' in html  # normalised: the grammar's separators
    assert "(as written: refuses at 3)" in html  # "[1," then "1" where " " is due
