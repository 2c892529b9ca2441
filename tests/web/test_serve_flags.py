"""``GET /api/serve-flags``: the tools source's fields that are vLLM serve flags, with the values
vLLM's own registries list, read in its runner (issue 45, M1: the Tools tab's pickers list them,
never a second list of their own). No model is needed: the app answers without its lifespan."""

from __future__ import annotations

import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.engine.grammars.request import SERVE_FLAGS
from app.engine.grammars.tools.builders import STARTING
from app.main import create_app
from app.settings import Settings

pytestmark = pytest.mark.server  # vLLM's runner, in its own virtualenv


@pytest.fixture(scope="module")
def answer(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    directory = tmp_path_factory.mktemp("serve-flags")
    client = TestClient(create_app(Settings(cache_dir=directory, db_path=directory / "p.db")))
    # The answer never waits for vLLM's code to start: until it has, it says so, with no values.
    deadline = time.monotonic() + 240
    while True:
        response = client.get("/api/serve-flags", headers={"Host": "localhost"})
        assert response.status_code == 200, response.text
        found: dict[str, Any] = response.json()
        if found["available"] or time.monotonic() > deadline:
            return found
        assert found["reason"] == STARTING, found
        assert all(field["values"] == [] for field in found["fields"])
        time.sleep(0.5)


def test_each_field_is_a_request_source_s_serve_flag(answer: dict[str, Any]) -> None:
    assert answer["available"], answer
    fields = {f["field"]: f for f in answer["fields"]}
    assert set(fields) == {"reasoning_parser", "strict_level", "strict_tool_calling"}
    assert {f["serve"] for f in fields.values()} <= set(SERVE_FLAGS)
    assert fields["strict_level"]["flag"] == "--tool-strict-level"


def test_the_values_are_vllm_s_own(answer: dict[str, Any]) -> None:
    fields = {f["field"]: f["values"] for f in answer["fields"]}
    assert fields["strict_level"] == ["auto", "function", "parameter"]  # ToolStrictLevel
    assert fields["strict_tool_calling"] == [True, False]
    parsers = {p["name"]: p for p in answer["reasoning_parsers"]}
    assert fields["reasoning_parser"] == sorted(parsers)
    assert {"qwen3", "deepseek_r1"} <= set(parsers)
    assert parsers["qwen3"]["reasoning_end"] == "</think>"
    # a parser that does not fit this tokenizer says why instead of an end marker
    assert all(p["reasoning_end"] or p["reason"] for p in parsers.values())
