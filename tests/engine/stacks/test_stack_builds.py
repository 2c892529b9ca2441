"""Tags each real release builds, and formats checked against the request model's tokenizer
(issue #40): vLLM 0.34.0's GLM-4.7 non-strict tag keeps an array value as raw text where 0.32.0
compiles it as JSON; ``deepseek_v3`` is available on DeepSeek V4's tokenizer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from app.engine.grammars.spec import CompileOptions, GrammarSpec
from app.engine.grammars.tools.base import ToolsRequest
from app.engine.grammars.tools.compile import ToolsCompiler
from app.engine.model.shipped_tokenizers import tokenizer_dir
from app.engine.stacks import runner
from app.settings import Settings
from app.vocabulary import GrammarKind
from tests.engine.stacks.test_stack_replay import SEARCH as QUERY

SEARCH: dict[str, Any] = json.loads(json.dumps(QUERY))
SEARCH["function"]["parameters"]["properties"]["paths"] = {
    "type": "array",
    "items": {"type": "string"},
}
SEARCH["function"]["parameters"]["required"] = ["query", "paths"]


def _arrays(tag: Any, at: str = "") -> dict[str, Any]:
    """Every JSON pointer in ``tag`` to a format compiling an array as JSON."""
    found = {}
    if isinstance(tag, dict):
        if tag.get("type") == "json_schema" and tag.get("json_schema") == {"type": "array"}:
            found[at] = tag
        for key, value in tag.items():
            found |= _arrays(value, f"{at}/{key}")
    elif isinstance(tag, list):
        for index, value in enumerate(tag):
            found |= _arrays(value, f"{at}/{index}")
    return found


def _at(tag: Any, pointer: str) -> Any:
    for part in pointer.strip("/").split("/"):
        tag = tag[int(part)] if isinstance(tag, list) else tag[part]
    return tag


def test_glm47_non_strict_array_parameter_differs_between_0_32_0_and_0_34_0(
    settings: Settings, tmp_path: Path
) -> None:
    path = str(tokenizer_dir("qwen3.6", settings.cache_dir))
    request = ToolsRequest(builder="vllm", format="glm47", tools=(SEARCH,), tool_choice="required")
    old = runner(settings, "vllm-0.32.0").build(request, path)
    new = runner(settings, "vllm-0.34.0").build(request, path)
    assert old.builder_versions["vllm"] == "0.32.0" and new.builder_versions["vllm"] == "0.34.0"
    assert old.tag is not None and new.tag is not None and old.tag != new.tag
    arrays = _arrays(old.tag)  # 0.32.0: the array value is compiled as JSON
    assert len(arrays) == 1, arrays
    (pointer,) = arrays
    assert _at(new.tag, pointer)["type"] == "any_text"  # 0.34.0: kept as raw text
    assert not _arrays(new.tag)


def test_deepseek_v3_is_available_on_deepseek_v4_s_tokenizer(settings: Settings) -> None:
    path = str(tokenizer_dir("deepseek-v4", settings.cache_dir))
    source = json.dumps(
        {"builder": "vllm", "format": "deepseek_v3", "tools": [SEARCH], "tool_choice": "required"}
    )
    _, build = ToolsCompiler(path).build(GrammarSpec(GrammarKind.TOOLS, source, CompileOptions()))
    assert build.tag is not None
    formats = {f.name: f for f in runner(settings, "vllm-0.34.0").formats(tokenizer=path)}
    assert formats["deepseek_v3"].available, formats["deepseek_v3"].reason
