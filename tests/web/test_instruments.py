"""Breakpoints, the shadow continuation and the per-path table over HTTP, on the toy engine."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.engine import Engine
from app.main import create_app
from app.settings import Settings
from tests.conftest import as_page
from tests.web.conftest import TOY_SETTINGS
from tests.web.sse import parse_events

SCHEMA = {
    "type": "object",
    "properties": {
        "a": {"type": "array", "items": {"type": "integer"}, "maxItems": 3},
        "b": {"type": "string", "maxLength": 4},
    },
    "required": ["a", "b"],
}


@pytest.fixture(scope="module")
def api(toy: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    db_path: Path = tmp_path_factory.mktemp("instruments") / "permalinks.db"
    app: FastAPI = create_app(Settings(**TOY_SETTINGS, db_path=db_path), engine=toy)
    with TestClient(app) as client:
        yield as_page(client)


def _body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "grammar": {"kind": "json_schema", "source": json.dumps(SCHEMA)},
        "messages": [{"role": "user", "content": "a"}],
        "max_tokens": 60,
    }
    return body | overrides


def _steps(api: TestClient, **overrides: Any) -> list[dict[str, Any]]:
    """The whole run of a session without breakpoints (the reference)."""
    session_id = api.post("/api/sessions", json=_body(**overrides)).json()["id"]
    api.post(f"/api/sessions/{session_id}/step", json={"n": 60})
    steps: list[dict[str, Any]] = api.get(f"/api/sessions/{session_id}").json()["steps"]
    return steps


def _run(api: TestClient, session_id: str) -> list[dict[str, str]]:
    return parse_events(api.get(f"/api/sessions/{session_id}/events?format=json").text)


def test_a_run_stops_on_a_path_breakpoint_and_continue_goes_on(api: TestClient) -> None:
    reference = _steps(api)
    expected = next(s["index"] for s in reference if s["path"] == "$.b")
    breakpoint_ = {"when": "path", "value": "$.b"}
    session_id = api.post("/api/sessions", json=_body(breakpoints=[breakpoint_])).json()["id"]
    events = _run(api, session_id)
    names = [e["event"] for e in events]
    assert names[-3:] == ["break", "paused", "end"]
    assert json.loads(events[-3]["data"]) == {
        "index": expected, "when": "path", "label": "path $.b", "value": "$.b",
    }  # fmt: skip
    assert [int(e["id"]) for e in events if e["event"] == "step"] == list(range(expected + 1))
    resumed = api.post(f"/api/sessions/{session_id}/resume").json()
    assert resumed["resumed"]["index"] == expected and not resumed["done"]
    rest = _run(api, session_id)
    assert "break" not in [e["event"] for e in rest] and rest[-2]["event"] == "done"
    steps = api.get(f"/api/sessions/{session_id}").json()["steps"]
    assert [s["token_id"] for s in steps] == [s["token_id"] for s in reference]


def test_step_n_stops_at_a_breakpoint_too(api: TestClient) -> None:
    reference = _steps(api)
    expected = next(s["index"] for s in reference if s["token_text"] == ",")
    body = _body(breakpoints=[{"when": "token", "value": ","}])
    session_id = api.post("/api/sessions", json=body).json()["id"]
    answer = api.post(f"/api/sessions/{session_id}/step", json={"n": 60}).json()
    assert len(answer["steps"]) == expected + 1 and not answer["done"]


@pytest.mark.parametrize(
    ("breakpoint_", "where"),
    [
        ({"when": "nowhere"}, "when"),
        ({"when": "path"}, "value"),
        ({"when": "top1_blocked", "k": 0}, "k"),
        ({"when": "empty_mask", "value": 3}, "value"),
    ],
)
def test_a_bad_breakpoint_is_a_422_naming_it(
    api: TestClient, breakpoint_: dict[str, Any], where: str
) -> None:
    response = api.post("/api/sessions", json=_body(breakpoints=[breakpoint_]))
    assert response.status_code == 422
    error = response.json()["error"]
    assert "/breakpoints/0" in (error.get("pointer") or "") + error["message"]
    assert where in error["message"]


def test_breakpoints_are_kept_in_the_permalink_and_reopen_with_it(api: TestClient) -> None:
    breakpoints = [{"when": "path", "value": "$.a*"}, {"when": "top1_blocked", "k": 2}]
    session_id = api.post("/api/sessions", json=_body(breakpoints=breakpoints)).json()["id"]
    api.post(f"/api/sessions/{session_id}/step", json={"n": 2})
    plain = api.post("/api/permalinks", json=_body()).json()["id"]
    shared = api.post("/api/permalinks", json=_body(breakpoints=breakpoints)).json()["id"]
    assert shared != plain  # part of what is debugged: in the content the id hashes
    snapshot = api.get(f"/api/permalinks/{shared}").json()
    assert snapshot["request"]["breakpoints"] == breakpoints  # their defaults left out
    assert "breakpoints" not in api.get(f"/api/permalinks/{plain}").json()["request"]
    reopened = api.post(f"/api/permalinks/{shared}/session").json()
    events = _run(api, reopened["id"])
    assert "break" in [e["event"] for e in events]


def _expected_alarms(steps: list[dict[str, Any]], i: int) -> list[str]:
    """The default alarms at step ``i``, found from the records' own fields: a run of 8 steps
    whose allowed set is whitespace only (digits only), read from ``classes``."""

    def only(step: dict[str, Any], key: str) -> bool:
        classes = step.get("classes") or {}
        return bool(step["allowed_count"] > 0 and classes.get(key) == step["allowed_count"])

    def running(key: str) -> bool:
        return i >= 7 and all(only(s, key) for s in steps[i - 7 : i + 1])

    expected = []
    if running("whitespace"):
        expected.append("whitespace_only k=8")
    if running("digit"):
        expected.append("digits_only k=8")
    if steps[i]["allowed_count"] == 0:
        expected.append("empty_mask")
    if not steps[i]["mask_accept_agree"]:
        expected.append("disagreement")
    return expected


@pytest.mark.parametrize(
    ("grammar", "marked"),
    [
        # every step allows digits only: marked from the 8th on
        ({"kind": "regex", "source": "[0-9]{40}"}, range(7, 40)),
        # from the 11th digit on, each step allows the end too: the run ends there
        ({"kind": "regex", "source": "[0-9]{10,40}"}, range(7, 10)),
    ],
    ids=["digits_only", "then_the_end_too"],
)
def test_the_records_carry_the_default_alarms(
    api: TestClient, grammar: dict[str, Any], marked: range
) -> None:
    steps = _steps(api, grammar=grammar, max_tokens=40)
    assert [s["alarms"] for s in steps] == [_expected_alarms(steps, i) for i in range(len(steps))]
    assert [i for i, s in enumerate(steps) if s["alarms"]] == list(marked)


def test_the_per_path_table_adds_up_the_records(api: TestClient) -> None:
    session_id = api.post("/api/sessions", json=_body()).json()["id"]
    api.post(f"/api/sessions/{session_id}/step", json={"n": 60})
    steps = api.get(f"/api/sessions/{session_id}").json()["steps"]
    rows = api.get(f"/api/sessions/{session_id}/by-path").json()
    assert sorted(i for r in rows for i in r["steps"]) == [s["index"] for s in steps]
    for row in rows:
        mine = [s for s in steps if (s["path"] or "(text)") == row["path"]]
        assert row["tokens"] == len(mine) and row["steps"] == [s["index"] for s in mine]
        assert row["top1_blocked"] == sum(not s["top"][0]["allowed"] for s in mine)
        assert row["removed_mass"] == pytest.approx(sum(s["blocked_mass"] for s in mine))
    masses = [r["removed_mass"] for r in rows]
    assert masses == sorted(masses, reverse=True)
    trace = api.get(f"/api/sessions/{session_id}/trace").json()
    assert trace["by_path"] == rows


def test_a_shadow_from_the_prompt_parts_where_the_mask_first_changed_the_token(
    api: TestClient,
) -> None:
    session_id = api.post("/api/sessions", json=_body()).json()["id"]
    api.post(f"/api/sessions/{session_id}/step", json={"n": 60})
    steps = api.get(f"/api/sessions/{session_id}").json()["steps"]
    answer = api.post(f"/api/sessions/{session_id}/shadow", json={"from": 0, "tokens": 8}).json()
    assert 1 <= len(answer["tokens"]) <= 8 and answer["from"] == 0
    # greedy with no mask: each token is the raw favourite the constrained step recorded, as
    # long as the two paths agree
    first = answer["tokens"][0]
    assert first["token_id"] == steps[0]["top"][0]["token_id"]
    parts = next(s["index"] for s in steps if s["token_id"] != s["top"][0]["token_id"])
    assert answer["parts_at"] == parts
    assert answer["removed_mass_until"] == pytest.approx(
        sum(s["blocked_mass"] for s in steps[: parts + 1])
    )


def test_a_shadow_past_the_steps_is_a_422(api: TestClient) -> None:
    session_id = api.post("/api/sessions", json=_body()).json()["id"]
    response = api.post(f"/api/sessions/{session_id}/shadow", json={"from": 3})
    assert response.status_code == 422 and "from" in response.json()["error"]["message"]
