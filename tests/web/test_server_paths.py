"""No answer names a path of this server (issue #46, item 9): ``GET /api/tool-formats`` (vLLM's
start-up check names the tokenizer it refuses, which is a directory of the cache), and a tools
compile's answers through vLLM's builder (a tag, no tag and why, vLLM's refusal), on the real
model, the real runner in .venv-vllm and real xgrammar."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.engine import Engine
from app.main import create_app
from app.settings import Settings
from tests.conftest import as_page

ROOT = Path(__file__).resolve().parent.parent.parent
# A path-like word: "/a/b" (a JSON pointer like "/tools/0" is one too, and is told apart by
# whether its first part is a directory of this machine's root).
_PATH = re.compile(r"(?<![\w.~<>:-])/[\w.+~-]+(?:/[\w.+~-]*)*")
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "strict": True,
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
            },
        },
    }
]


def _strings(value: Any) -> Iterator[str]:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend([*item.keys(), *item.values()])
        elif isinstance(item, list):
            stack.extend(item)


def server_paths(answer: Any) -> list[str]:
    """Every absolute path of this machine, or its home, cache or checkout, in ``answer``."""
    needles = {str(Path.home()), str(Settings().cache_dir), str(ROOT)}
    found = []
    for text in _strings(answer):
        found += [n for n in needles if n in text]
        found += [p for p in _PATH.findall(text) if Path("/", p.split("/")[1]).exists()]
    return found


@pytest.fixture(scope="module")
def formats(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    directory = tmp_path_factory.mktemp("formats")
    client = TestClient(create_app(Settings(cache_dir=directory, db_path=directory / "p.db")))
    deadline = time.monotonic() + 300  # vLLM's code starts in the background
    while True:
        response = client.get("/api/tool-formats", headers={"Host": "localhost"})
        assert response.status_code == 200, response.text
        rows: list[dict[str, Any]] = response.json()
        if not [r for r in rows if r["name"] == "starting"] or time.monotonic() > deadline:
            return rows
        time.sleep(0.2)


def test_tool_formats_name_no_server_path(formats: list[dict[str, Any]]) -> None:
    cache = str(Settings().cache_dir)  # the detector sees what must not be there
    assert server_paths({"reason": f"the tokenizer of '{cache}/models/x'"})
    assert server_paths(["see /tmp/x.json", {"at": "/tools/0/function/name"}]) == ["/tmp/x.json"]
    refused = [r for r in formats if r["builder"] == "vllm" and not r["available"]]
    assert refused and all(r["reason"] for r in refused)  # vLLM's start-up check said why
    assert any("cannot be used with the tokenizer of" in r["reason"] for r in refused)
    assert server_paths(formats) == []


@pytest.fixture(scope="module")
def client(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    directory = tmp_path_factory.mktemp("paths")
    app: FastAPI = create_app(
        Settings(db_path=directory / "p.db", cache_dir=directory), engine=engine
    )
    with TestClient(app) as test_client:
        yield as_page(test_client)


def _compile(client: TestClient, **fields: Any) -> tuple[int, Any]:
    source = {"builder": "vllm", "format": "hermes", "tools": TOOLS, **fields}
    response = client.post(
        "/api/compile", json={"kind": "tools", "source": json.dumps(source, indent=2)}
    )
    return response.status_code, response.json()


def test_a_tools_compiles_answers_name_no_server_path(client: TestClient) -> None:
    status, tagged = _compile(client, tool_choice="required")
    assert status == 200 and tagged["structural_tag"], tagged
    status, untagged = _compile(client, tool_choice="required", strict_tool_calling=False)
    assert status == 200 and untagged["no_tag_reason"], untagged
    status, refused = _compile(client, format="llama3_json")  # vLLM's start-up check
    assert status == 422, refused
    assert "cannot be used with the tokenizer of" in refused["error"]["message"]
    assert server_paths([tagged, untagged, refused]) == []
