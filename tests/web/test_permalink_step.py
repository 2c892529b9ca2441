"""A permalink reopened at the step shared (``/s/{id}?step=36``, #26 p12): the query is outside
the snapshot and its id; the page shows progress while the session is rebuilt."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from tests.web.test_pages import HX

BODY = {
    "grammar": {"kind": "regex", "source": "[a-z ]{300}"},
    "raw_prompt": "A story:",
    "max_tokens": 12,
    "actions": [{"op": "step", "n": 6}],
}


def _stored(client: TestClient) -> str:
    answer = client.post("/api/permalinks", json=BODY)
    assert answer.status_code in (200, 201), answer.text
    snapshot_id: str = answer.json()["id"]
    return snapshot_id


def _inspected(html: str) -> int:
    match = re.search(r'<section id="inspector"[^>]*data-index="(\d+)"', html)
    assert match, html[:400]
    return int(match.group(1))


def test_the_shared_step_is_inspected_when_the_session_is_rebuilt(client: TestClient) -> None:
    snapshot_id = _stored(client)
    route = f"/ui/permalinks/{snapshot_id}/open"
    assert _inspected(client.post(route, headers=HX).text) == 5  # the last step
    assert _inspected(client.post(route, data={"step": "2"}, headers=HX).text) == 2
    assert _inspected(client.post(route, data={"step": "40"}, headers=HX).text) == 5  # past it
    for bad, said in (("x", "step must be a whole number"), ("-1", "step must be 0 or more")):
        refused = client.post(route, data={"step": bad}, headers=HX)
        assert refused.status_code == 422 and said in refused.text, refused.text


def test_the_page_of_a_permalink_shows_progress_and_carries_the_step(client: TestClient) -> None:
    snapshot_id = _stored(client)
    page = client.get(f"/s/{snapshot_id}?step=2")
    assert page.status_code == 200
    assert 'data-step="2"' in page.text
    assert 'id="replaying"' in page.text and "Replaying the shared trace: 6 steps" in page.text
    assert "Press <kbd>space</kbd> to run" not in page.text
    plain = client.get(f"/s/{snapshot_id}").text
    assert "data-step=" not in plain and 'id="replaying"' in plain
    assert client.get(f"/s/{snapshot_id}?step=-3").status_code == 422
    assert 'id="replaying"' not in client.get("/").text
