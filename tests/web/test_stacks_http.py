"""``GET /api/stacks`` and ``GET /api/tool-formats?model=`` over HTTP (issue #40): each stack with
the versions its own process imports, available or the reason not; and the formats answered for
a model are those its builder lists on that model's tokenizer."""

from __future__ import annotations

import dataclasses
import importlib.metadata
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from xgrammar import builtin_structural_tag

from app.engine import Engine
from app.engine.model.shipped_tokenizers import tokenizer_dir
from app.engine.stacks import runner
from app.main import create_app
from app.settings import Settings
from tests.conftest import as_page
from tests.engine.stacks.test_stacks import VERSIONS
from tests.vllm_oracle import STACK_PATHS, VLLM_PYTHON, run_vllm
from tests.web.test_tokenizer_models import loaded

pytestmark = pytest.mark.server

SHIPPED = ["vllm-0.32.0=vllm_python", "vllm-0.34.0=vllm==0.34.0 over vllm-0.32.0"]
#: A release configured but never installed by `make stacks`: listed, unavailable, saying why.
MISSING = "vllm-0.99.0=vllm==0.99.0 over vllm-0.32.0"


@pytest.fixture(scope="module")
def stack_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """The shipped stacks and one not installed (their runners are the run's)."""
    assert VLLM_PYTHON.exists(), f"{VLLM_PYTHON} is missing: run `make vllm-install`"
    assert STACK_PATHS["vllm-0.34.0"][0].is_dir(), "vLLM 0.34.0 is missing: run `make stacks`"
    return Settings(
        db_path=tmp_path_factory.mktemp("stacks") / "p.db",
        compile_workers=1,
        vllm_python=VLLM_PYTHON,
        vllm_timeout_s=600,
        stacks_dir=STACK_PATHS["vllm-0.34.0"][0].parent,
        stacks=[*SHIPPED, MISSING],
    )


@pytest.fixture(scope="module")
def client(engine: Engine, stack_settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(stack_settings, engine=engine)) as test_client:
        yield as_page(test_client)


@pytest.fixture(scope="module")
def stacks(client: TestClient) -> dict[str, dict[str, Any]]:
    answer = client.get("/api/stacks")
    assert answer.status_code == 200, answer.text
    rows = answer.json()
    assert [row["id"] for row in rows] == ["maskscope", "vllm-0.32.0", "vllm-0.34.0", "vllm-0.99.0"]
    assert all(set(row) == {"id", "versions", "forward", "available", "reason"} for row in rows)
    return {row["id"]: row for row in rows}


@pytest.mark.parametrize("stack", ["vllm-0.32.0", "vllm-0.34.0"])
def test_a_release_reports_the_versions_its_own_interpreter_imports(
    stacks: dict[str, dict[str, Any]], stack: str
) -> None:
    row = stacks[stack]
    assert row["available"] and row["reason"] is None, row
    # what that release's interpreter, with its own path, imports (not through its runner)
    assert row["versions"] == run_vllm(VERSIONS, None, stack=stack)
    assert row["versions"]["vllm"] == stack.removeprefix("vllm-")


def test_only_the_base_release_serves_a_model_here(stacks: dict[str, dict[str, Any]]) -> None:
    assert stacks["vllm-0.32.0"]["forward"] == (VLLM_PYTHON.parent / "vllm").is_file()
    assert not stacks["vllm-0.34.0"]["forward"]  # layered over 0.32.0: builds and masks only


def test_maskscope_reports_this_process_s_libraries(stacks: dict[str, dict[str, Any]]) -> None:
    row = stacks["maskscope"]
    assert row["available"] and row["forward"] and row["reason"] is None
    names = ("xgrammar", "llguidance", "transformers")
    assert row["versions"] == {name: importlib.metadata.version(name) for name in names}


def test_a_release_not_installed_is_listed_unavailable_with_the_reason(
    stacks: dict[str, dict[str, Any]],
) -> None:
    row = stacks["vllm-0.99.0"]
    assert not row["available"] and not row["forward"] and row["versions"] == {}
    assert "vllm-0.99.0 is not installed (vllm==0.99.0)" in row["reason"]
    assert "make stacks" in row["reason"]


def _formats(client: TestClient, model: str) -> list[dict[str, Any]]:
    loaded(client, model)  # the model's tokenizer, loaded on first use
    answer = client.get(f"/api/tool-formats?model={model}")
    assert answer.status_code == 200, answer.text
    rows: list[dict[str, Any]] = answer.json()
    return rows


@pytest.mark.parametrize("model", ["qwen3.6", "deepseek-v4"])
def test_the_formats_for_a_model_are_its_builders_own_listing_on_its_tokenizer(
    client: TestClient, stack_settings: Settings, model: str
) -> None:
    """vLLM's rows are what vLLM 0.32.0's (the default builder's release) own start-up check
    says on that model's tokenizer, asked through the stack's runner; xgrammar's, the keys its
    registry holds."""
    rows = _formats(client, model)
    tokenizer = str(tokenizer_dir(model, stack_settings.cache_dir))
    listed = runner(stack_settings, "vllm-0.32.0").formats(tokenizer=tokenizer)
    assert [r for r in rows if r["builder"] == "vllm"] == [dataclasses.asdict(f) for f in listed]
    xgrammar = {r["name"] for r in rows if r["builder"] == "xgrammar"}
    assert xgrammar == set(builtin_structural_tag._structural_tag_registry)


def test_the_formats_follow_the_model_asked_for(client: TestClient) -> None:
    """The two shipped tokenizers make different formats available (``deepseek_v3``'s markers
    are in DeepSeek V4's vocabulary, not Qwen3.6's): the answer is each model's, not one."""
    available = {
        model: {r["name"] for r in _formats(client, model) if r["available"]}
        for model in ("qwen3.6", "deepseek-v4")
    }
    assert "deepseek_v3" in available["deepseek-v4"] - available["qwen3.6"]


def test_an_unknown_model_is_a_422_at_its_pointer(client: TestClient) -> None:
    answer = client.get("/api/tool-formats?model=no-such-model")
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["code"] == "invalid_input" and error["pointer"] == "/model"
    assert "no model 'no-such-model' here" in error["message"] and "'qwen3.6'" in error["message"]
