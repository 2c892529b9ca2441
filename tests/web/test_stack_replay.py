"""``POST /api/replay`` under a serving stack (issue #40): the row each step is masked with is
the one vLLM's own structured-output manager fills, in the real stack's runner (vLLM 0.32.0's
virtualenv; 0.34.0's wheel over it), on the request model's tokenizer (Qwen3.6)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.engine import Engine
from app.main import create_app
from app.settings import Settings
from tests.engine.stacks.test_stack_replay import SEARCH
from tests.web.test_tokenizer_models import loaded

pytestmark = pytest.mark.server

THINK_END, NN, TOOL_CALL, NL = 248069, 271, 248058, 198
HERMES = {
    "kind": "tools",
    "source": json.dumps(
        {
            "builder": "vllm",
            "format": "hermes",
            "tools": [SEARCH],
            "tool_choice": "required",
            "reasoning_parser": "qwen3",
        }
    ),
}


@pytest.fixture(scope="module")
def client(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = Settings(db_path=tmp_path_factory.mktemp("stack") / "p.db", compile_workers=1)
    with TestClient(create_app(settings, engine=engine)) as test_client:
        loaded(test_client, "qwen3.6")
        yield test_client


def replay(client: TestClient, **fields: Any) -> dict[str, Any]:
    body = {"grammar": HERMES, "model": "qwen3.6", "token_ids": [THINK_END, NN, TOOL_CALL, NL]}
    answer = client.post("/api/replay", json=body | fields)
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


@pytest.mark.parametrize("stack", ["vllm-0.32.0", "vllm-0.34.0"])
def test_issue_46149_under_each_release_refuses_the_blank_line_and_names_the_release(
    client: TestClient, stack: str
) -> None:
    result = replay(client, stack=stack)
    first, second = result["tokens"][:2]
    assert first["token_id"] == THINK_END and first["accepted"]
    assert second["token_id"] == NN and not second["accepted"]
    assert result["mask_by"]["stack"] == stack
    assert f"vLLM {stack.removeprefix('vllm-')} built this tag" in result["refusal"]["cause"]


def test_the_default_stack_is_maskscopes_own_masks(client: TestClient) -> None:
    # In-process, with reasoning "none": </think> is fed to the grammar, which refuses it.
    result = replay(client)
    assert result.get("mask_by") in (None, {}) or result["mask_by"]["stack"] == "maskscope"
    assert not result["tokens"][0]["accepted"]


def test_an_unknown_stack_is_a_422_at_its_pointer(client: TestClient) -> None:
    body = {"grammar": HERMES, "model": "qwen3.6", "text": "x", "stack": "vllm-9.9.9"}
    answer = client.post("/api/replay", json=body)
    assert answer.status_code == 422
    assert answer.json()["error"]["pointer"] == "/stack"
