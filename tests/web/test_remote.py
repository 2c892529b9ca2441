"""The HTTP API with a remote engine configured: a real ``vllm serve`` behind a TCP proxy that the
tests stop and restart (the server going away and coming back)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.engine import Engine
from app.main import create_app
from app.settings import Settings
from tests.engine.model.remote.conftest import spec_for
from tests.tcp_proxy import TcpProxy
from tests.vllm_server import VllmServer
from tests.web.conftest import session_body

pytestmark = pytest.mark.remote

_READY_S = 180.0


@pytest.fixture(scope="module")
def proxy(vllm_server: VllmServer) -> Iterator[TcpProxy]:
    """A proxy in front of the full-vocabulary server."""
    made = TcpProxy(vllm_server.port)
    yield made
    made.stop()


@pytest.fixture(scope="module")
def db_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One permalink database for the apps of this module."""
    return tmp_path_factory.mktemp("remote") / "permalinks.db"


def _settings(db_path: Path, *specs: Any) -> Settings:
    return Settings(db_path=db_path, max_sessions=8, remote_engines=list(specs), tokenizers=[])


@pytest.fixture(scope="module")
def client(engine: Engine, proxy: TcpProxy, db_path: Path) -> Iterator[TestClient]:
    """An app with the local model and the remote engine ``vllm`` (ready when this returns), and
    an engine ``down`` that nothing serves."""
    down = spec_for("http://127.0.0.1:9/v1", id="down")
    settings = _settings(db_path, spec_for(f"{proxy.root_url}/v1"), down)
    with TestClient(create_app(settings, engine=engine)) as test_client:
        deadline = time.monotonic() + _READY_S
        while not _model(test_client, "vllm")["ready"] or "connecting" in str(
            _model(test_client, "down")["reason"]
        ):
            assert time.monotonic() < deadline, test_client.get("/api/models").json()
            time.sleep(0.5)
        yield test_client


def _model(client: TestClient, model_id: str) -> dict[str, Any]:
    listed = client.get("/api/models").json()
    return next(m for m in listed if m["id"] == model_id)


def _error(response: Any, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code
    message: str = response.json()["error"]["message"]
    return message


def test_the_models_list_the_local_model_and_each_remote_engine(client: TestClient) -> None:
    listed = {m["id"]: m for m in client.get("/api/models").json()}
    assert set(listed) == {"local", "vllm", "down"}
    assert listed["local"]["kind"] == "local" and listed["local"]["ready"]
    assert listed["vllm"] | {"url": None} == {
        "id": "vllm",
        "kind": "remote",
        "model": "smollm2-135m-instruct",
        "tokenizer": listed["vllm"]["tokenizer"],
        "vocab_size": 49152,
        "url": None,
        "ready": True,
        "reason": None,
        "added_tokens": listed["local"]["added_tokens"],  # the same SmolLM2 tokenizer
    }
    assert {"id": 0, "content": "<|endoftext|>", "special": True} in listed["vllm"]["added_tokens"]
    assert not listed["down"]["ready"] and "unreachable" in listed["down"]["reason"]


def test_a_remote_session_records_its_identity_and_gives_the_local_tokens(
    client: TestClient,
) -> None:
    opened = client.post("/api/sessions", json=session_body(model="vllm"))
    assert opened.status_code == 200, opened.text
    model = opened.json()["model"]
    assert model["model_id"] == "vllm" and model["served_name"] == "smollm2-135m-instruct"
    assert model["vllm"] == "0.32.0" and re.fullmatch(r"[0-9a-f]{64}", model["tokenizer_sha256"])
    assert "weights_sha256" not in model
    remote = client.post(f"/api/sessions/{opened.json()['id']}/step", json={"n": 6}).json()
    local_id = client.post("/api/sessions", json=session_body()).json()["id"]
    local = client.post(f"/api/sessions/{local_id}/step", json={"n": 6}).json()
    assert [s["token_id"] for s in remote["steps"]] == [s["token_id"] for s in local["steps"]]
    for record in remote["steps"]:
        assert record["inexact"] == [] and record["blocked_mass_max"] == record["blocked_mass"]
        assert all(t["logit"] is None for t in record["top"])
    assert "inexact" not in local["steps"][0]


def test_unknown_and_unready_models_are_refused(client: TestClient) -> None:
    message = _error(
        client.post("/api/sessions", json=session_body(model="nope")), 422, "invalid_input"
    )
    assert "no model 'nope'" in message
    message = _error(
        client.post("/api/sessions", json=session_body(model="down")), 503, "not_ready"
    )
    assert "remote engine 'down'" in message and "unreachable" in message


def test_a_stopped_server_is_a_502_and_the_session_continues_when_it_is_back(
    client: TestClient, proxy: TcpProxy
) -> None:
    session_id = client.post("/api/sessions", json=session_body(model="vllm")).json()["id"]
    client.post(f"/api/sessions/{session_id}/step", json={"n": 3})
    proxy.stop()
    try:
        failed = client.post(f"/api/sessions/{session_id}/step", json={"n": 2})
        assert "is unreachable" in _error(failed, 502, "engine_unreachable")
        # The first of the two had its forward pass already (run during the step before it):
        # it is kept; the second left no trace.
        assert len(client.get(f"/api/sessions/{session_id}").json()["steps"]) == 4
    finally:
        proxy.start()
    resumed = client.post(f"/api/sessions/{session_id}/step", json={"n": 2})
    assert resumed.status_code == 200, resumed.text
    assert [s["index"] for s in resumed.json()["steps"]] == [4, 5]


def test_a_permalink_made_on_the_remote_engine_reopens_on_it_and_is_refused_without_it(
    client: TestClient, engine: Engine, db_path: Path
) -> None:
    body = session_body(model="vllm", actions=[{"op": "step", "n": 4}])
    made = client.post("/api/permalinks", json=body)
    assert made.status_code == 201, made.text
    snapshot_id = made.json()["id"]
    stored = client.get(f"/api/permalinks/{snapshot_id}").json()
    assert stored["request"]["model"] == "vllm" and stored["differences"] == []
    assert set(stored["model"]) == {"model_id", "served_name", "tokenizer_sha256", "vllm"}
    reopened = client.post(f"/api/permalinks/{snapshot_id}/session")
    assert reopened.status_code == 200, reopened.text
    assert reopened.json()["model"]["model_id"] == "vllm" and len(reopened.json()["steps"]) == 4
    with TestClient(create_app(_settings(db_path), engine=engine)) as without:
        refused = without.post(f"/api/permalinks/{snapshot_id}/session")
        assert "'vllm'" in _error(refused, 409, "model_not_configured")
        differences = without.get(f"/api/permalinks/{snapshot_id}").json()["differences"]
        assert differences == ["model: shared with 'vllm', which is not configured on this server"]


def _tokenizer_routes(model: str) -> list[tuple[str, str, dict[str, Any] | None]]:
    """Every route whose answer depends on the tokenizer, as (method, url, body) on ``model``."""
    grammar = session_body()["grammar"]
    document = '{"id": 42, "name": "Ada Lovelace", "tags": []}'
    return [
        ("POST", "/api/compile", {**grammar, "model": model}),
        ("POST", "/api/replay", {"grammar": grammar, "text": document, "model": model}),
        ("POST", "/api/tests", {"grammar": grammar, "model": model,
                                "tests": [{"text": document, "expect": "fail"}]}),
        ("POST", "/api/doctor", {"grammar": grammar, "model": model, "budget_ms": 500}),
        ("POST", "/api/export?target=vllm", {**grammar, "model": model}),
        ("GET", f"/api/vocab?model={model}", None),
    ]  # fmt: skip


def _without_timings(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items() if not k.endswith(("_ms", "_us"))}
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


def test_every_tokenizer_route_answers_for_the_model_it_names(client: TestClient) -> None:
    for (method, url, body), (_, local_url, local_body) in zip(
        _tokenizer_routes("vllm"), _tokenizer_routes("local"), strict=True
    ):
        remote = client.request(method, url, json=body)
        assert remote.status_code == 200, (url, remote.text)
        local = client.request(method, local_url, json=local_body)
        if url.startswith("/api/export"):  # the served name is the engine's, not the hub id
            assert "smollm2-135m-instruct" in remote.json()["code"]
            assert "smollm2-135m-instruct" not in local.json()["code"]
        elif not url.startswith("/api/doctor"):  # the Doctor's search is bounded by time
            # The same tokenizer (the served model's is the local one's): the same answers.
            assert _without_timings(remote.json()) == _without_timings(local.json()), url
    for method, url, body in _tokenizer_routes("down"):
        message = _error(client.request(method, url, json=body), 503, "not_ready")
        assert "remote engine 'down'" in message, url
    for method, url, body in _tokenizer_routes("nope"):
        assert "no model 'nope'" in _error(client.request(method, url, json=body), 422,
                                           "invalid_input"), url  # fmt: skip


def test_grammars_compile_once_for_one_tokenizer(client: TestClient, engine: Engine) -> None:
    """The served model's tokenizer is the local one (the same hash): one compiler, one cache."""
    remote = client.app.state.maskscope.engine_for("vllm")  # type: ignore[attr-defined]
    assert remote.model.tokens.vocab_size == engine.model.tokens.vocab_size
    assert remote.compiler is engine.compiler


def test_a_permalink_opens_on_another_model_when_asked(
    client: TestClient, engine: Engine, db_path: Path
) -> None:
    body = session_body(model="vllm", actions=[{"op": "step", "n": 4}])
    snapshot_id = client.post("/api/permalinks", json=body).json()["id"]
    with TestClient(create_app(_settings(db_path), engine=engine)) as without:
        opened = without.post(f"/api/permalinks/{snapshot_id}/session", json={"model": "local"})
        assert opened.status_code == 200, opened.text
        assert opened.json()["model"]["model_id"] == engine.model.identity.model_id
        local_id = without.post("/api/sessions", json=session_body()).json()["id"]
        local = without.post(f"/api/sessions/{local_id}/step", json={"n": 4}).json()["steps"]
        assert [s["token_id"] for s in opened.json()["steps"]] == [s["token_id"] for s in local]
        unknown = without.post(f"/api/permalinks/{snapshot_id}/session", json={"model": "nope"})
        assert "no model 'nope'" in _error(unknown, 422, "invalid_input")
