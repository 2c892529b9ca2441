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
from tests.engine.remote.conftest import spec_for
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
    return Settings(db_path=db_path, max_sessions=8, remote_engines=list(specs))


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
    }
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
    remote = client.post(f"/api/sessions/{opened.json()['id']}/step", json={"n": 12}).json()
    local_id = client.post("/api/sessions", json=session_body()).json()["id"]
    local = client.post(f"/api/sessions/{local_id}/step", json={"n": 12}).json()
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
        assert len(client.get(f"/api/sessions/{session_id}").json()["steps"]) == 3
    finally:
        proxy.start()
    resumed = client.post(f"/api/sessions/{session_id}/step", json={"n": 2})
    assert resumed.status_code == 200, resumed.text
    assert [s["index"] for s in resumed.json()["steps"]] == [3, 4]


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
