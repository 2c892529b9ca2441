"""The page's debugger inputs on the server (issue 42, issue 45 M5): the end rules of the
options bar reach the session request, with a bad id named; a permalink's rebuild reports its
progress by the page's token (toy model: real xgrammar masks)."""

from __future__ import annotations

import re
import threading

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.web.services import rebuilds
from tests.web.test_pages import HX

FORM = {
    "kind": "regex", "source": "[a-z ]{40}", "preset": "maskscope", "prompt_mode": "raw",
    "raw_prompt": "A word:", "temperature": "0", "top_p": "1", "seed": "1", "max_tokens": "8",
}  # fmt: skip


def _session(client: TestClient, **fields: str) -> str:
    html = client.post("/ui/sessions", data={**FORM, **fields}, headers=HX).text
    match = re.search(r'data-session-id="([^"]+)"', html)
    assert match, html[:400]
    return match.group(1)


def test_the_end_rules_of_the_options_bar_reach_the_session(toy_client: TestClient) -> None:
    session = _session(toy_client, min_tokens="3", stop_token_ids="[4, 5 6]", stop="zz\n\nqq  ")
    answer = toy_client.post(f"/api/sessions/{session}/step", json={"n": 1}).json()
    end = answer["end"]
    assert (end["min_tokens"], end["stop_token_ids"], end["stop"]) == (3, [4, 5, 6], ["zz", "qq  "])


def test_no_end_rules_on_the_page_means_none_in_the_request(toy_client: TestClient) -> None:
    session = _session(toy_client, min_tokens="", stop_token_ids="", stop="")
    answer = toy_client.post(f"/api/sessions/{session}/step", json={"n": 1}).json()
    assert "end" not in answer


def test_a_stop_id_that_is_no_integer_is_a_422_naming_it(toy_client: TestClient) -> None:
    refused = toy_client.post("/ui/sessions", data={**FORM, "stop_token_ids": "4, x"}, headers=HX)
    assert refused.status_code == 422 and refused.headers["HX-Retarget"] == "#toast"
    assert "stop_token_ids: token ids are integers" in refused.text, refused.text
    assert "/stop_token_ids/1" in refused.text, refused.text
    negative = toy_client.post("/ui/sessions", data={**FORM, "min_tokens": "-1"}, headers=HX)
    assert negative.status_code == 422 and "min_tokens" in negative.text


def _permalink(client: TestClient, steps: int) -> str:
    body = {
        "grammar": {"kind": "regex", "source": "[a-z ]{300}"}, "raw_prompt": "A story:",
        "max_tokens": steps, "actions": [{"op": "step", "n": steps}],
    }  # fmt: skip
    answer = client.post("/api/permalinks", json=body)
    assert answer.status_code in (200, 201), answer.text
    snapshot_id: str = answer.json()["id"]
    return snapshot_id


def test_a_rebuild_reports_its_steps_by_the_page_s_token(toy_client: TestClient) -> None:
    snapshot_id = _permalink(toy_client, 120)
    token = "page-token-0123"
    progress = f"/ui/permalinks/{snapshot_id}/progress?rebuild={token}"
    assert toy_client.get(progress).json() == {"done": None, "total": None}  # none yet
    opened: list[int] = []
    thread = threading.Thread(target=lambda: opened.append(toy_client.post(
        f"/ui/permalinks/{snapshot_id}/open", data={"rebuild": token}, headers=HX
    ).status_code))  # fmt: skip
    thread.start()
    seen: list[tuple[int, int]] = []
    while thread.is_alive():
        answer = toy_client.get(progress).json()
        if answer["done"] is not None:
            seen.append((answer["done"], answer["total"]))
        thread.join(timeout=0.01)
    assert opened == [200]
    # over: its final count is still answered (the page may ask before the answer reaches it)
    assert seen, "no progress was seen during the rebuild"
    final = toy_client.get(progress).json()
    assert final["total"] == 120 and final["done"] >= max(d for d, _ in seen), (final, seen)
    assert all(total == 120 and 0 <= done <= 120 for done, total in seen), seen
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)  # it only moves forward


def test_an_ended_rebuild_is_forgotten_after_its_minute(
    toy_client: TestClient, toy_app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    snapshot_id = _permalink(toy_client, 4)
    token = "page-token-4567"
    opened = toy_client.post(
        f"/ui/permalinks/{snapshot_id}/open", data={"rebuild": token}, headers=HX
    )
    assert opened.status_code == 200
    state = toy_app.state.maskscope
    assert rebuilds.progress(state, token) == (4, 4)
    monkeypatch.setattr(rebuilds, "KEPT_S", 0.0)
    assert rebuilds.progress(state, token) is None


def test_a_token_that_is_no_page_token_tracks_nothing(
    toy_client: TestClient, toy_app: FastAPI
) -> None:
    snapshot_id = _permalink(toy_client, 4)
    opened = toy_client.post(
        f"/ui/permalinks/{snapshot_id}/open", data={"rebuild": "bad token!"}, headers=HX
    )
    assert opened.status_code == 200
    assert rebuilds.progress(toy_app.state.maskscope, "bad token!") is None
