"""The `engine` and `compare` fields over HTTP: compile, sessions, replay, permalinks."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from app.engine.grammars.llguidance import VERSION
from tests.web.conftest import session_body

TIMINGS = {"forward_ms", "mask_us", "total_ms", "rollback"}  # what may differ across runs
INTEGER = {"kind": "json_schema", "source": '{"type": "integer"}'}


def _llg(grammar: dict[str, Any]) -> dict[str, Any]:
    return {**grammar, "engine": "llguidance"}


def test_compile_with_llguidance_says_what_is_not_carried(client: TestClient) -> None:
    body = _llg({**INTEGER, "options": {"indent": 2}})
    answer = client.post("/api/compile", json=body).json()
    assert answer["engine"] == "llguidance" and answer["not_carried"] == ["indent"]
    assert answer["stats"]["compile_ms"] > 0 and '"json_schema"' in answer["grammar"]
    plain = client.post("/api/compile", json=INTEGER).json()
    assert plain["engine"] == "xgrammar" and "not_carried" not in plain


def test_the_vllm_preset_under_llguidance_is_vllms_guidance_backend(client: TestClient) -> None:
    body = _llg({**INTEGER, "options": {"preset": "vllm"}})
    options = client.post("/api/compile", json=body).json()["options"]
    assert options["any_whitespace"] is True and options["strict_mode"] is False
    xgr = client.post("/api/compile", json={**INTEGER, "options": {"preset": "vllm"}}).json()
    assert xgr["options"]["strict_mode"] is True


def test_an_llguidance_refusal_is_422_with_its_pointer(client: TestClient) -> None:
    body = _llg({"kind": "json_schema", "source": '{"type": "array",\n "uniqueItems": true}'})
    response = client.post("/api/compile", json=body)
    error = response.json()["error"]
    assert response.status_code == 422 and error["code"] == "grammar_invalid"
    assert error["pointer"] == "/uniqueItems" and error["line"] == 2
    assert "uniqueItems" in error["message"]


def test_compare_must_name_the_other_engine(client: TestClient) -> None:
    response = client.post("/api/replay", json={"grammar": INTEGER, "text": "1",
                                                "compare": "xgrammar"})  # fmt: skip
    assert response.status_code == 422
    assert response.json()["error"]["pointer"] == "/compare"


def test_a_compare_session_reports_where_the_engines_part(client: TestClient) -> None:
    body = session_body(grammar=_llg(INTEGER), raw_prompt="n =", messages=[], max_tokens=5,
                        schema_in_prompt=False, compare="xgrammar")  # fmt: skip
    sid = client.post("/api/sessions", json=body).json()["id"]
    vocab = client.get("/api/vocab").json()["tokens"]
    minus, zero = vocab.index("-"), vocab.index("0")
    client.post(f"/api/sessions/{sid}/force", json={"token_id": minus})
    answer = client.post(f"/api/sessions/{sid}/force", json={"token_id": zero}).json()
    follower = answer["steps"][0]["follower"]
    assert answer["steps"][0]["engine"] == "llguidance"
    assert follower["engine"] == "xgrammar" and follower["only_driver"] == 1
    assert follower["top_differences"][0]["token_id"] == zero
    assert answer["follower"] == {"engine": "xgrammar", "first_divergence": 1, "ended_at": 1,
                                  "refused": follower["refused"]}  # fmt: skip
    assert client.get(f"/api/sessions/{sid}").json()["steps"][0]["follower"]["diverged"] is False


def test_replay_with_compare_gives_both_verdicts(client: TestClient) -> None:
    answer = client.post("/api/replay", json={"grammar": INTEGER, "text": "-0",
                                              "compare": "llguidance"}).json()  # fmt: skip
    assert answer["accepted"] is False and answer["rejection"]["offset"] == 1
    assert answer["follower"] == {"engine": "llguidance", "accepted": True, "complete": True,
                                  "rejection": None}  # fmt: skip
    alone = client.post("/api/replay", json={"grammar": INTEGER, "text": "-0"}).json()
    assert alone["follower"] is None


def test_a_permalink_made_with_llguidance_reopens_with_the_same_trace(client: TestClient) -> None:
    body = session_body(grammar=_llg(session_body()["grammar"]), max_tokens=20,
                        compare="xgrammar")  # fmt: skip
    sid = client.post("/api/sessions", json=body).json()["id"]
    client.post(f"/api/sessions/{sid}/step", json={"n": 12})
    original = client.get(f"/api/sessions/{sid}").json()["steps"]
    shared = client.post("/api/permalinks", json={**body, "actions": [{"op": "step", "n": 12}]})
    snapshot_id = shared.json()["id"]
    snapshot = client.get(f"/api/permalinks/{snapshot_id}").json()
    assert snapshot["request"]["grammar"]["engine"] == "llguidance"
    assert snapshot["request"]["compare"] == "xgrammar"
    assert snapshot["versions"]["llguidance"] == VERSION and snapshot["differences"] == []
    reopened = client.post(f"/api/permalinks/{snapshot_id}/session").json()
    untimed = [{k: v for k, v in s.items() if k not in TIMINGS} for s in reopened["steps"]]
    assert untimed == [{k: v for k, v in s.items() if k not in TIMINGS} for s in original]
    assert all(s["engine"] == "llguidance" and s["follower"] for s in reopened["steps"])


def test_a_default_engine_leaves_the_snapshot_as_it_was(client: TestClient) -> None:
    snapshot_id = client.post("/api/permalinks", json=session_body(max_tokens=8)).json()["id"]
    snapshot = client.get(f"/api/permalinks/{snapshot_id}").json()
    assert "engine" not in snapshot["request"]["grammar"] and "compare" not in snapshot["request"]
    assert "llguidance" not in snapshot["versions"]
