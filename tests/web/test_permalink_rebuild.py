"""A permalink shared from the page reopened (issue 45, item 3): its recorded tokens' forward
passes run in one, so the rebuild runs no forward pass a step, and the live session holds the
steps recorded at share time (real default model)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from app.engine import Engine
from tests.web.conftest import session_body
from tests.web.test_pages import HX

STEPS = 12


def _shared(client: TestClient) -> tuple[str, list[int]]:
    """A session of ``STEPS`` steps shared through the page: its id and its tokens."""
    body = session_body(max_tokens=STEPS + 8)
    session_id = client.post("/api/sessions", json=body).json()["id"]
    steps = client.post(f"/api/sessions/{session_id}/step", json={"n": STEPS}).json()["steps"]
    html = client.post(f"/ui/sessions/{session_id}/share", headers=HX).text
    return html.split('href="/s/')[1].split('"')[0], [s["token_id"] for s in steps]


def test_a_shared_session_reopens_without_a_forward_pass_a_step(
    client: TestClient, engine: Engine
) -> None:
    snapshot_id, tokens = _shared(client)
    batcher = engine.model.batcher
    before = batcher.counts.batches
    opened = client.post(f"/api/permalinks/{snapshot_id}/session")
    assert opened.status_code in (200, 201), opened.text
    assert batcher.counts.batches == before  # the steps' passes ran as one prefill
    assert [s["token_id"] for s in opened.json()["steps"]] == tokens
    session_id = opened.json()["id"]
    following = client.post(f"/api/sessions/{session_id}/step", json={"n": 2})
    assert following.status_code == 200 and len(following.json()["steps"]) == 2
    assert batcher.counts.batches > before  # past the trace, steps run their own passes


def test_the_page_s_open_rebuilds_the_same_way(client: TestClient, engine: Engine) -> None:
    snapshot_id, tokens = _shared(client)
    batcher = engine.model.batcher
    before = batcher.counts.batches
    page = client.post(f"/ui/permalinks/{snapshot_id}/open", headers=HX)
    assert page.status_code == 200, page.text
    assert batcher.counts.batches == before
    assert all(f'id="tok-{i}"' in page.text for i in range(len(tokens)))
