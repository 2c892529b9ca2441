"""``GET /api/tool-formats``: both builders' formats, read from the installed libraries (no
model is needed: the app answers without its lifespan)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from fastapi.testclient import TestClient
from xgrammar import builtin_structural_tag

from app.engine.grammars.tools.builders import STARTING
from app.main import create_app
from app.settings import Settings


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    directory = tmp_path_factory.mktemp("formats")
    client = TestClient(create_app(Settings(cache_dir=directory, db_path=directory / "p.db")))
    # The answer never waits for vLLM's code to start: until it has, vLLM is one "starting" row.
    deadline = time.monotonic() + 180
    while True:
        response = client.get("/api/tool-formats", headers={"Host": "localhost"})
        assert response.status_code == 200, response.text
        found: list[dict[str, Any]] = response.json()
        starting = [row for row in found if row["name"] == "starting"]
        if not starting or time.monotonic() > deadline:
            return found
        assert starting == [
            {
                "builder": "vllm",
                "name": "starting",
                "builds_tag": False,
                "reasoning_end": None,
                "available": False,
                "reason": STARTING,
            }
        ]
        time.sleep(0.2)


def test_every_row_has_the_contracts_fields(rows: list[dict[str, Any]]) -> None:
    keys = {"builder", "name", "builds_tag", "reasoning_end", "available", "reason"}
    assert rows and all(set(row) == keys for row in rows)
    assert {row["builder"] for row in rows} == {"vllm", "xgrammar"}


def test_xgrammars_formats_are_the_keys_it_registers(rows: list[dict[str, Any]]) -> None:
    xgrammar = {row["name"]: row for row in rows if row["builder"] == "xgrammar"}
    assert set(xgrammar) == set(builtin_structural_tag._structural_tag_registry)
    assert all(row["available"] and row["builds_tag"] for row in xgrammar.values())
    assert xgrammar["qwen_3"]["reasoning_end"] == "</think>"
    assert xgrammar["deepseek_v4"]["reasoning_end"] == "</think>"
    assert xgrammar["llama"]["reasoning_end"] is None  # no reasoning block in its format


def test_vllm_is_listed_with_why_it_is_unavailable(rows: list[dict[str, Any]]) -> None:
    vllm = [row for row in rows if row["builder"] == "vllm"]
    assert vllm
    for row in vllm:  # available, or saying why not
        assert row["available"] or row["reason"]


def test_vllms_parsers_are_listed_once_its_code_has_started(rows: list[dict[str, Any]]) -> None:
    vllm = {row["name"]: row for row in rows if row["builder"] == "vllm"}
    assert "starting" not in vllm
    assert {"hermes", "qwen3_coder", "deepseek_v4"} <= set(vllm)  # .venv-vllm: `make test`
