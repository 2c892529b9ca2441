"""``min_tokens``, ``stop_token_ids`` and ``stop`` on ``POST /api/replay`` and sessions (a 422
"extra inputs" before): the answer's ``end``, and bad values named where they are."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient

TERMINAL = {"kind": "json_schema", "source": json.dumps({"enum": ["yes"]})}


def test_replay_takes_the_end_rules_and_answers_the_end(client: TestClient) -> None:
    body = {"grammar": TERMINAL, "text": '"yes"', "min_tokens": 64, "stop": ["never"]}
    answer = client.post("/api/replay", json=body)
    assert answer.status_code == 200, answer.text
    end = answer.json()["end"]
    steps = len(answer.json()["tokens"])
    assert [e["step"] for e in end["empty_masks"]] == [steps]
    assert end["empty_masks"][0]["flag"] == "empty mask: vLLM aborts this request"
    assert end["min_tokens"] == 64 and end["stop"] == ["never"]
    assert (
        "end" not in client.post("/api/replay", json={**body, "min_tokens": 0, "stop": []}).json()
    )


def test_a_bad_stop_id_is_a_422_naming_it(client: TestClient) -> None:
    body = {"grammar": TERMINAL, "text": '"yes"', "stop_token_ids": [0, 10**8]}
    answer = client.post("/api/replay", json=body)
    assert answer.status_code == 422
    assert answer.json()["error"]["pointer"] == "/stop_token_ids/1"
    empty = client.post("/api/replay", json={**body, "stop_token_ids": [], "stop": [""]})
    assert empty.status_code == 422


def test_a_session_answers_its_end(client: TestClient) -> None:
    body = {
        "grammar": TERMINAL,
        "messages": [{"role": "user", "content": "Answer yes."}],
        "max_tokens": 16,
        "min_tokens": 40,
    }
    created = client.post("/api/sessions", json=body)
    assert created.status_code == 200, created.text
    sid = created.json()["id"]
    ran = client.post(f"/api/sessions/{sid}/step", json={"n": 16}).json()
    assert ran["end"]["empty_masks"], ran["end"]
    assert ran["end"]["empty_masks"][0]["step"] == len(ran["steps"]) - 1
