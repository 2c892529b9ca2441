"""The page's model picker, footer and permalinks on another model, rendered in-process: an app
with the local model and a remote engine ``down`` that nothing serves (no vLLM needed)."""

from __future__ import annotations

import html
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.engine import Engine
from app.main import create_app
from app.settings import Settings
from app.web.runtime.state import AppState
from app.web.schemas.bodies import PermalinkIn
from app.web.services import permalinks as sharing
from tests.conftest import as_page
from tests.engine.model.remote.conftest import spec_for
from tests.web.conftest import session_body
from tests.web.test_pages import HX, _form

_DOWN_S = 60.0


@pytest.fixture(scope="module")
def client(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The app, once the first check of ``down`` has failed (its reason is then final)."""
    down = spec_for("http://127.0.0.1:9/v1", id="down")
    db_path = tmp_path_factory.mktemp("picker") / "permalinks.db"
    settings = Settings(db_path=db_path, max_sessions=8, remote_engines=[down])
    with TestClient(create_app(settings, engine=engine)) as test_client:
        deadline = time.monotonic() + _DOWN_S
        while "connecting" in str(_listed(test_client)["down"]["reason"]):
            assert time.monotonic() < deadline, _listed(test_client)
            time.sleep(0.2)
        yield as_page(test_client)


def _listed(client: TestClient) -> dict[str, dict[str, Any]]:
    return {m["id"]: m for m in client.get("/api/models").json()}


def _option(page: str, model_id: str) -> str:
    match = re.search(rf'<option value="{model_id}"[^>]*>[^<]*</option>', page)
    assert match, page
    return html.unescape(match.group(0))


def snapshot_made_on(engine: Engine, model_id: str, **model: str) -> dict[str, Any]:
    """A snapshot of four greedy steps on the nested example, as if made on ``model_id`` (with
    the identity ``model``)."""
    body = PermalinkIn.model_validate(session_body(max_tokens=20, actions=[{"op": "step", "n": 4}]))
    snapshot = sharing.snapshot_of_request(body, engine.model.identity)
    snapshot["request"]["model"] = model_id
    snapshot["model"] = {"model_id": model_id, **model}
    return snapshot


def _stored(client: TestClient, model_id: str, **model: str) -> str:
    state: AppState = client.app.state.maskscope  # type: ignore[attr-defined]
    assert state.engine is not None
    snapshot_id, _ = state.store.put(snapshot_made_on(state.engine, model_id, **model))
    return snapshot_id


def test_the_picker_lists_every_model_and_a_not_ready_one_disabled_with_its_reason(
    client: TestClient,
) -> None:
    page = client.get("/").text
    local, down = _option(page, "local"), _option(page, "down")
    assert "selected" in local and "disabled" not in local
    assert "local · HuggingFaceTB/SmolLM2-135M-Instruct" in local
    reason = _listed(client)["down"]["reason"]
    assert "unreachable" in reason
    assert " disabled" in down and "selected" not in down
    assert f"down · smollm2-135m-instruct (not ready: {reason})</option>" in down
    assert (
        f'title="remote · smollm2-135m-instruct at http://127.0.0.1:9/v1 · not ready: {reason}"'
        in down
    )
    footer = re.search(r'<footer id="footer".*?</footer>', page, re.S)
    assert footer and "model <b>local</b> · HuggingFaceTB/SmolLM2-135M-Instruct" in footer.group(0)


def test_the_form_routes_run_on_the_picked_model(client: TestClient) -> None:
    opened = client.post("/ui/sessions", data=_form(model="local"), headers=HX)
    assert opened.status_code == 200, opened.text
    assert re.search(r'<footer id="footer" class="footer" hx-swap-oob="true" data-model="local">',
                     opened.text)  # fmt: skip
    for route in ("/ui/sessions", "/ui/compile", "/ui/doctor", "/ui/replay", "/ui/tests"):
        refused = client.post(route, data=_form(model="down", text="{}", tests="[]"), headers=HX)
        assert refused.status_code == 503, (route, refused.text)
        message = html.unescape(refused.text)
        assert "remote engine 'down'" in message and "unreachable" in message, route
        unknown = client.post(route, data=_form(model="nope", text="{}", tests="[]"), headers=HX)
        assert unknown.status_code == 422 and "no model 'nope'" in html.unescape(unknown.text)
    compiled = client.post("/ui/compile", data=_form(model="local"), headers=HX)
    assert compiled.status_code == 200 and "root ::=" in compiled.text


def test_a_permalink_on_a_model_not_configured_offers_to_open_on_the_picked_one(
    client: TestClient,
) -> None:
    snapshot_id = _stored(client, "elsewhere", served_name="big-model")
    page = client.get(f"/s/{snapshot_id}")
    assert page.status_code == 200
    assert (
        "<li>model: shared with &#39;elsewhere&#39;, which is not configured on this server</li>"
        in page.text
    )
    assert 'data-model-missing="elsewhere"' in page.text and 'id="btn-open-elsewhere"' in page.text
    assert "tokens and figures (probabilities, ranks, allowed counts) may differ" in page.text
    assert "selected" in _option(page.text, "local")  # the picker falls back to a model here

    route = f"/ui/permalinks/{snapshot_id}/open"
    refused = client.post(route, headers=HX)
    assert refused.status_code == 409 and "elsewhere" in refused.text
    opened = client.post(route, data={"model": "local"}, headers=HX)
    assert opened.status_code == 200, opened.text
    assert len(re.findall(r'id="tok-\d+"', opened.text)) == 4
    assert 'data-model="local"' in opened.text and "model <b>local</b>" in opened.text
    assert client.post(route, data={"model": "nope"}, headers=HX).status_code == 422
    invalid = client.post(route, data={"model": "not an id"}, headers=HX)
    assert invalid.status_code == 422 and "/model" in invalid.text


def test_a_permalink_made_on_a_remote_engine_preselects_it(client: TestClient) -> None:
    snapshot_id = _stored(client, "down", served_name="smollm2-135m-instruct")
    page = client.get(f"/s/{snapshot_id}").text
    assert "selected" in _option(page, "down") and "selected" not in _option(page, "local")
    assert "data-model-missing" not in page
    assert "the model <b>down</b> is not ready yet" in page
    refused = client.post(f"/ui/permalinks/{snapshot_id}/open", headers=HX)
    assert refused.status_code == 503 and "remote engine &#39;down&#39;" in refused.text
