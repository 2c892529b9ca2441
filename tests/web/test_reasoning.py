"""``reasoning`` through the API: sessions, replay and permalinks (the default leaves ids as
they were; the setting reopens), and a clear 422 where no end marker exists."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import xgrammar as xgr
from fastapi.testclient import TestClient

from app.engine import Engine
from app.main import create_app
from app.settings import Settings
from tests.conftest import as_page

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]
PROMPT = "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<think>\n"


def _tag(reasoning: str) -> dict[str, Any]:
    source = xgr.get_model_structural_tag("qwen_3", tools=TOOLS, reasoning=reasoning)
    return {"kind": "structural_tag", "source": source.model_dump_json()}


@pytest.fixture(scope="module")
def api(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    db: Path = tmp_path_factory.mktemp("reasoning") / "permalinks.db"
    with TestClient(create_app(Settings(db_path=db), engine=engine)) as client:
        yield as_page(client)


def _body(**overrides: Any) -> dict[str, Any]:
    return {"grammar": _tag("enabled"), "raw_prompt": PROMPT, "max_tokens": 8, **overrides}


def test_a_session_under_mask_after_end_records_unmasked_steps(api: TestClient) -> None:
    created = api.post("/api/sessions", json=_body(reasoning="mask_after_end"))
    assert created.status_code == 200, created.text
    steps = api.post(f"/api/sessions/{created.json()['id']}/step", json={"n": 2}).json()["steps"]
    for step in steps:
        assert step["masked"] is False and step["allowed_count"] == step["vocab_size"]
        assert step["blocked_mass"] == 0 and step["segment"]["kind"] == "reasoning"
    plain = api.post("/api/sessions", json=_body())
    first = api.post(f"/api/sessions/{plain.json()['id']}/step", json={"n": 1}).json()["steps"]
    assert first[0]["masked"] is True and first[0]["allowed_count"] < first[0]["vocab_size"]
    assert first[0]["segment"] == {
        "kind": "reasoning", "tag": None, "tool": None, "parameter": None,
    }  # fmt: skip


def test_mask_after_end_without_a_marker_is_a_422_at_reasoning(api: TestClient) -> None:
    answer = api.post(
        "/api/sessions", json=_body(grammar=_tag("disabled"), reasoning="mask_after_end")
    )
    assert answer.status_code == 422
    assert answer.json()["error"]["pointer"] == "/reasoning"
    assert "end marker" in answer.json()["error"]["message"]
    bad = api.post("/api/sessions", json=_body(reasoning="sometimes"))
    assert bad.status_code == 422 and bad.json()["error"]["pointer"] == "/reasoning"


def test_replay_takes_reasoning(api: TestClient) -> None:
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>'
    text = "So.</think>\n\n" + call
    body = {"grammar": _tag("enabled"), "text": text, "reasoning": "mask_after_end"}
    answer = api.post("/api/replay", json=body).json()
    assert answer["accepted"] and answer["complete"]
    tokens = answer["tokens"]
    assert tokens[0]["masked"] is False and tokens[-1]["masked"] is True
    kinds = [t["segment"]["kind"] for t in tokens]
    assert kinds[0] == "reasoning" and "arguments" in kinds and "tool_name" in kinds
    city = next(t for t in tokens if t["segment"]["kind"] == "arguments" and "Rome" in t["text"])
    assert city["path"] == "$.city"


def test_permalinks_leave_the_default_out_and_reopen_the_setting(api: TestClient) -> None:
    actions = [{"op": "step", "n": 2}]
    without = api.post("/api/permalinks", json={**_body(), "actions": actions}).json()["id"]
    default = api.post(
        "/api/permalinks", json={**_body(reasoning="none"), "actions": actions}
    ).json()["id"]
    assert default == without
    assert "reasoning" not in api.get(f"/api/permalinks/{without}").json()["request"]
    gated = api.post(
        "/api/permalinks", json={**_body(reasoning="mask_after_end"), "actions": actions}
    ).json()["id"]
    assert gated != without
    assert api.get(f"/api/permalinks/{gated}").json()["request"]["reasoning"] == "mask_after_end"
    opened = api.post(f"/api/permalinks/{gated}/session").json()
    assert [s["masked"] for s in opened["steps"]] == [False, False]
