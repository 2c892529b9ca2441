"""Issue 26, problem 5: a 4xx of a panel's request is shown in that panel, in plain words, with
the limit in KB; any other page request's error still lands in the toast; the API keeps JSON."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from app.caps import MAX_SOURCE_BYTES
from tests.web.test_pages import _form, _session

HX = {"HX-Request": "true"}
BIG = '{"description": "' + "x" * 280_000 + '"}'  # 273 KB: over the cap, under the body limit


def test_a_source_over_the_cap_is_said_in_the_compile_panel(client: TestClient) -> None:
    answer = client.post(
        "/ui/compile", data=_form(source=BIG), headers={**HX, "HX-Target": "compile-result"}
    )
    assert answer.status_code == 422
    assert answer.headers["HX-Retarget"] == "#compile-result"
    assert answer.headers["HX-Reswap"] == "outerHTML"
    html = answer.text
    assert html.startswith('<div id="compile-result" class="compile"')
    assert "The source is 273 KB: over the 256 KB limit (262,144 characters)." in html
    assert 'data-error-message="the source is 273 KB' in html and "<code>/source</code>" in html


def test_a_body_over_the_limit_is_said_in_the_panel_too(client: TestClient) -> None:
    huge = _form(source='{"description": "' + "x" * 475_000 + '"}')
    answer = client.post("/ui/compile", data=huge, headers={**HX, "HX-Target": "compile-result"})
    assert answer.status_code == 413 and answer.headers["HX-Retarget"] == "#compile-result"
    assert re.search(
        r"The request body is \d{3} KB: over the 293 KB limit \(300,000 bytes\)\.", answer.text
    ), answer.text
    api = client.post(
        "/api/compile", content=b"x" * 300_001, headers={"Content-Type": "application/json"}
    )
    assert api.status_code == 413 and api.json()["error"]["code"] == "too_large"


def test_each_panel_gets_its_own_error(client: TestClient) -> None:
    text = "x" * (MAX_SOURCE_BYTES + 2048)
    replay = client.post(
        "/ui/replay", data=_form(text=text), headers={**HX, "HX-Target": "replay-result"}
    )
    assert replay.status_code == 422 and replay.headers["HX-Retarget"] == "#replay-result"
    assert replay.text.startswith('<div id="replay-result" class="replay-result"')
    assert "the text is 258 KB: over the 256 KB limit" in replay.text
    tests = client.post(
        "/ui/tests", data=_form(tests="[oops"), headers={**HX, "HX-Target": "tests-result"}
    )
    assert tests.status_code == 422 and tests.headers["HX-Reswap"] == "innerHTML"
    assert tests.text.startswith("<div data-error-code=") and "tests: not JSON" in tests.text
    sid = _session(client)
    missing = client.get(f"/ui/sessions/{sid}/steps/9", headers={**HX, "HX-Target": "inspector"})
    assert missing.status_code == 422 and missing.headers["HX-Retarget"] == "#inspector"
    assert 'id="inspector" class="inspector panel"' in missing.text
    assert "step 9 does not exist" in missing.text


def test_an_action_error_stays_in_the_toast_and_the_api_answers_json(client: TestClient) -> None:
    sid = _session(client)
    blocked = client.post(
        f"/ui/sessions/{sid}/force",
        data={"token_id": 0, "at": 5},
        headers={**HX, "HX-Target": "tokens"},
    )
    assert blocked.status_code in (409, 422) and blocked.headers["HX-Retarget"] == "#toast"
    api = client.post("/api/compile", json={"kind": "json_schema", "source": BIG})
    assert api.status_code == 422
    assert api.json()["error"] == {
        "message": "the source is 273 KB: over the 256 KB limit (262,144 characters)",
        "code": "invalid_request",
        "pointer": "/source",
    }
