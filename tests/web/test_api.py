"""The JSON API, in-process, each status code of the contract."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from tests.web.conftest import NESTED_SOURCE, session_body
from tests.web.sse import parse_events

STEP_KEYS = {
    "index", "token_id", "token_text", "token_bytes", "forced", "prob", "rank", "top",
    "blocked_mass", "allowed_count", "vocab_size", "bitmask", "depth", "path", "rules",
    "jump_forward", "probe", "mask_accept_agree", "engine", "forward_ms", "mask_us", "total_ms",
    "terminated", "allowed_tokens", "follower", "drafts", "rollback", "masked", "segment",
    "alarms", "classes", "straddle", "emptied_by_processors", "empty_mask",
}  # fmt: skip


def _error(response: Any, status: int, code: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert isinstance(error["message"], str) and error["message"]
    if code:
        assert error["code"] == code
    return error


def _session(client: TestClient, **overrides: Any) -> str:
    response = client.post("/api/sessions", json=session_body(**overrides))
    assert response.status_code == 200, response.text
    session_id: str = response.json()["id"]
    return session_id


def test_health(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["model"]["xgrammar"] == "0.2.9"
    assert ready.json()["sandbox"] == "full"  # this machine's kernel has Landlock and seccomp


def test_readyz_is_503_until_the_model_loads() -> None:
    app = create_app(Settings(model="/nonexistent/model"))
    with TestClient(app) as client:
        ready = client.get("/readyz")
        error = _error(ready, 503, "not_ready")
        assert "nonexistent" in error["message"] or "loading" in error["message"]
        assert ready.json()["sandbox"] == "full"
        assert client.get("/healthz").status_code == 200
        compile_error = client.post("/api/compile", json={"kind": "regex", "source": "a"})
        assert compile_error.status_code == 503


def test_compile(toy_client: TestClient) -> None:
    x = {"type": "number", "multipleOf": 2}
    # A title no other test compiles: the compile cache is shared by the whole test session.
    source = json.dumps({"title": "test_compile", "type": "object", "properties": {"x": x}})
    body = {"kind": "json_schema", "source": source}
    first = toy_client.post("/api/compile", json=body).json()
    assert first["warnings"] == ["multipleOf is not supported for type:number; ignoring multipleOf"]
    assert first["stats"]["cached"] is False and first["stats"]["size_bytes"] > 0
    assert "root ::=" in first["grammar"]
    assert first["options"]["any_whitespace"] is False and first["options"]["preset"] == "maskscope"
    again = toy_client.post("/api/compile", json=body).json()
    assert again["stats"]["cached"] is True and again["warnings"] == first["warnings"]


def test_presets_fill_options_and_explicit_ones_win(toy_client: TestClient) -> None:
    body = {"kind": "json_schema", "source": '{"type": "integer"}', "options": {"preset": "vllm"}}
    assert toy_client.post("/api/compile", json=body).json()["options"]["any_whitespace"] is True
    body["options"] = {"preset": "vllm", "any_whitespace": False, "indent": 2}
    options = toy_client.post("/api/compile", json=body).json()["options"]
    assert options["any_whitespace"] is False and options["indent"] == 2


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({"kind": "json_schema", "source": '{\n "type": "object",\n}'}, {"line": 3, "column": 1}),
        ({"kind": "ebnf", "source": 'root ::= "a" | b'}, {"line": 1, "column": 16}),
        ({"kind": "json_schema", "source": '{"type": "strnig"}'}, {"pointer": "/type"}),
        ({"kind": "pydantic", "source": "import os"}, {"line": 1, "column": 1}),
        (
            {
                "kind": "pydantic",
                "source": "from pydantic import BaseModel\nclass A(BaseModel):\n  x: Nope",
            },
            {"line": 3},
        ),
    ],
)
def test_compile_errors_are_422_with_a_place(
    toy_client: TestClient, body: dict[str, Any], where: dict[str, Any]
) -> None:
    error = _error(toy_client.post("/api/compile", json=body), 422)
    assert {k: error.get(k) for k in where} == where


def test_malformed_json_is_400(toy_client: TestClient) -> None:
    response = toy_client.post(
        "/api/compile", content=b'{"kind": ', headers={"content-type": "application/json"}
    )
    assert _error(response, 400, "malformed")["message"].startswith("malformed JSON")


@pytest.mark.parametrize(
    ("body", "pointer"),
    [
        ({"kind": "json_schema"}, "/source"),
        ({"kind": "yaml", "source": "x"}, "/kind"),
        ({"kind": "regex", "source": 5}, "/source"),
        ({"kind": "regex", "source": "a", "extra": 1}, "/extra"),
        ({"kind": "regex", "source": "a", "options": {"indent": 99}}, "/options/indent"),
    ],
)
def test_invalid_requests_are_422_with_a_pointer(
    toy_client: TestClient, body: dict[str, Any], pointer: str
) -> None:
    error = _error(toy_client.post("/api/compile", json=body), 422, "invalid_request")
    assert error["pointer"] == pointer
    assert error["message"].startswith(pointer)


def test_invalid_unicode_is_422(toy_client: TestClient) -> None:
    response = toy_client.post(
        "/api/compile",
        content=b'{"kind": "regex", "source": "a\\ud800"}',
        headers={"content-type": "application/json"},
    )
    error = _error(response, 422)
    assert error["pointer"] == "/source" and "unicode" in error["message"]


def test_a_body_too_large_is_413(toy_client: TestClient) -> None:
    body = {"kind": "regex", "source": "a" * 400_000}
    _error(toy_client.post("/api/compile", json=body), 413, "too_large")


def test_unknown_routes_and_sessions_are_404(toy_client: TestClient) -> None:
    _error(toy_client.get("/api/nothing"), 404)
    _error(toy_client.post("/api/sessions/nope/step", json={"n": 1}), 404, "session_not_found")
    _error(toy_client.get("/api/sessions/nope"), 404)


def test_a_session_steps_backs_and_forces(client: TestClient) -> None:
    created = client.post("/api/sessions", json=session_body()).json()
    assert created["prompt"]["tokens"] > 100 and "<|im_start|>" in created["prompt"]["text"]
    assert isinstance(created["sampling"]["seed"], int)
    assert created["model"]["weights_sha256"]
    sid = created["id"]
    stepped = client.post(f"/api/sessions/{sid}/step", json={"n": 3}).json()
    assert [s["index"] for s in stepped["steps"]] == [0, 1, 2]
    assert all(set(s) == STEP_KEYS for s in stepped["steps"])
    assert stepped["done"] is False and stepped["stop_reason"] is None
    assert stepped["validation"] is None
    assert stepped["text"] == "".join(s["token_text"] for s in stepped["steps"])
    backed = client.post(f"/api/sessions/{sid}/back", json={"n": 1}).json()
    assert backed["steps"] == [] and len(client.get(f"/api/sessions/{sid}").json()["steps"]) == 2
    hello = client.app.state.maskscope.engine.model.tokens.encode("hello")[0]  # type: ignore[attr-defined]
    refused = _error(client.post(f"/api/sessions/{sid}/force", json={"token_id": hello}), 409)
    assert refused["code"] == "token_refused" and "blocks token" in refused["message"]
    allowed = stepped["steps"][2]["token_id"]
    forced = client.post(f"/api/sessions/{sid}/force", json={"token_id": allowed}).json()
    assert forced["steps"][0]["forced"] is True and forced["steps"][0]["index"] == 2
    _error(client.post(f"/api/sessions/{sid}/force", json={"token_id": -1}), 422)
    _error(client.post(f"/api/sessions/{sid}/step", json={"n": 0}), 422)
    _error(client.post(f"/api/sessions/{sid}/step", json={"n": 513}), 422)


def test_force_at_an_earlier_step(client: TestClient) -> None:
    sid = _session(client)
    steps = client.post(f"/api/sessions/{sid}/step", json={"n": 6}).json()["steps"]
    same = client.post(
        f"/api/sessions/{sid}/force", json={"token_id": steps[1]["token_id"], "at": 1}
    )
    assert same.json()["steps"][0]["index"] == 1
    assert len(client.get(f"/api/sessions/{sid}").json()["steps"]) == 2


def test_a_session_with_drafts_records_them_and_checks_each_rollback(client: TestClient) -> None:
    created = client.post("/api/sessions", json=session_body(draft_tokens=3, max_tokens=16))
    sid = created.json()["id"]
    steps = client.post(f"/api/sessions/{sid}/step", json={"n": 16}).json()["steps"]
    assert all(s["drafts"]["accepted"] <= s["drafts"]["proposed"] <= 3 for s in steps)
    taken = [s for s in steps if s["drafts"]["accepted"]]
    assert taken and all(s["rollback"]["checked"] and not s["rollback"]["differs"] for s in taken)
    client.post(f"/api/sessions/{sid}/back", json={"n": 4})
    again = client.post(f"/api/sessions/{sid}/step", json={"n": 1}).json()["steps"][0]
    assert again["rollback"] == {
        "checked": True, "differs": [], "jump_forward_differs": False, "terminated_differs": False,
    }  # fmt: skip
    refused = _error(client.post("/api/sessions", json=session_body(draft_tokens=17)), 422)
    assert refused["pointer"] == "/draft_tokens"


def test_a_finished_session_refuses_to_step(client: TestClient) -> None:
    sid = _session(client, max_tokens=2)
    done = client.post(f"/api/sessions/{sid}/step", json={"n": 5}).json()
    assert len(done["steps"]) == 2 and done["done"] and done["stop_reason"] == "max_tokens"
    assert done["validation"]["valid"] is False
    _error(client.post(f"/api/sessions/{sid}/step", json={"n": 1}), 409, "session_finished")


def test_the_run_stream_sends_every_step_then_done(client: TestClient) -> None:
    sid = _session(client)
    body = client.get(f"/api/sessions/{sid}/events?format=json").text
    events = parse_events(body)
    steps = [e for e in events if e["event"] == "step"]
    assert [int(e["id"]) for e in steps] == list(range(len(steps)))
    assert [e["event"] for e in events[len(steps) :]] == ["done", "end"]
    final = json.loads(events[len(steps)]["data"])
    assert final["done"] and final["stop_reason"] == "terminated" and final["validation"]["valid"]
    assert json.loads(final["text"])["user"]
    records = [json.loads(e["data"]) for e in steps]
    assert records == client.get(f"/api/sessions/{sid}").json()["steps"]


def test_html_step_events_carry_the_bitmask(client: TestClient) -> None:
    sid = _session(client, max_tokens=3)
    events = parse_events(client.get(f"/api/sessions/{sid}/events").text)
    steps = [e for e in events if e["event"] == "step"]
    assert len(steps) == 3
    record = client.get(f"/api/sessions/{sid}").json()["steps"][0]
    assert f'data-bitmask="{record["bitmask"]}"' in steps[0]["data"]
    assert 'id="tok-0"' in steps[0]["data"]
    assert 'id="status"' in events[3]["data"] and events[3]["event"] == "done"


def test_a_reconnect_resumes_and_never_regenerates(client: TestClient) -> None:
    sid = _session(client, max_tokens=7)
    taken = client.post(f"/api/sessions/{sid}/step", json={"n": 5}).json()["steps"]
    body = client.get(
        f"/api/sessions/{sid}/events?format=json", headers={"Last-Event-ID": "2"}
    ).text
    steps = [json.loads(e["data"]) for e in parse_events(body) if e["event"] == "step"]
    assert [s["index"] for s in steps] == [3, 4, 5, 6]
    assert steps[:2] == taken[3:5]  # timings too: these were sent again, not generated again


def test_pause_answers_with_the_state(toy_client: TestClient) -> None:
    sid = _session(toy_client)
    paused = toy_client.post(f"/api/sessions/{sid}/pause").json()
    assert paused["steps"] == [] and paused["done"] is False


def test_replay(client: TestClient) -> None:
    grammar = {"kind": "json_schema", "source": NESTED_SOURCE}
    body = {"grammar": grammar, "text": '{"user": 5}', "bitmask_for": [1]}
    bad = client.post("/api/replay", json=body).json()
    assert bad["accepted"] is False and bad["rejection"]["offset"] == 9
    assert set(bad["tokens"][0]) == {
        "token_id", "text", "accepted", "allowed_count", "depth", "path", "rules", "masked",
        "segment", "classes", "empty_mask",
    }  # fmt: skip
    assert set(bad["tokens"][1]) == set(bad["tokens"][0]) | {"bitmask"}
    _error(client.post("/api/replay", json={**body, "bitmask_for": list(range(65))}), 422)
    ids = client.post("/api/replay", json={"grammar": grammar, "token_ids": [90, 2]}).json()
    assert ids["accepted"] is False
    _error(client.post("/api/replay", json={"grammar": grammar}), 422)
    both = client.post("/api/replay", json={"grammar": grammar, "text": "{", "token_ids": [90]})
    assert [t["token_id"] for t in both.json()["tokens"]][-1] == 90  # the text, then the ids


def test_an_evicted_session_is_410(toy: Any) -> None:
    app = create_app(Settings(max_sessions=2), engine=toy)
    with TestClient(app) as client:
        first, _, _ = (_session(client, max_tokens=2) for _ in range(3))
        error = _error(
            client.post(f"/api/sessions/{first}/step", json={"n": 1}), 410, "session_gone"
        )
        assert "evicted" in error["message"]


def test_examples_and_vocab(client: TestClient) -> None:
    listed = client.get("/api/examples").json()
    assert {e["id"] for e in listed} >= {"pricing", "nested"}
    pricing = client.get("/api/examples/pricing").json()
    assert json.loads(pricing["sources"]["json_schema"])["title"] == "PricingDecision"
    _error(client.get("/api/examples/nope"), 404)
    vocab = client.get("/api/vocab").json()
    assert vocab["vocab_size"] == len(vocab["tokens"]) == 49152
    assert vocab["tokens"][2] == "<|im_end|>"


def test_caps_are_declared_in_openapi(toy_client: TestClient) -> None:
    schemas = toy_client.get("/openapi.json").json()["components"]["schemas"]
    assert schemas["GrammarIn"]["properties"]["source"]["maxLength"] == 262144
    assert schemas["CountIn"]["properties"]["n"]["maximum"] == 512
    assert schemas["SessionIn"]["properties"]["max_tokens"]["maximum"] == 4096
    assert schemas["MessageIn"]["properties"]["content"]["maxLength"] == 32768


def test_the_step_response_carries_the_state_after_the_last_token(client: TestClient) -> None:
    sid = _session(client)
    opened = client.get(f"/api/sessions/{sid}").json()
    assert opened["state"]["depth"] == 0 and opened["state"]["path"] == "$"
    stepped = client.post(f"/api/sessions/{sid}/step", json={"n": 12}).json()
    after = stepped["state"]
    following = client.post(f"/api/sessions/{sid}/step", json={"n": 1}).json()["steps"][0]
    assert after == {k: following[k] for k in ("depth", "path", "rules")}
    assert stepped["steps"][0]["depth"] == 0 and stepped["steps"][0]["path"] == "$"
    backed = client.post(f"/api/sessions/{sid}/back", json={"n": 8}).json()
    fifth = stepped["steps"][5]
    assert backed["state"] == {k: fifth[k] for k in ("depth", "path", "rules")}
    assert all(s["probe"]["disagree"] == [] and s["engine"] == "xgrammar" for s in stepped["steps"])
