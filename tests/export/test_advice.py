"""What Code advises (issue 45): never a stack whose Doctor row refuses the schema (B7), and a
tools request's program prints the calls and defines only what it sends (B8)."""

from __future__ import annotations

import ast
import dataclasses
import json
from typing import Any

import pytest

from app.engine.grammars.spec import CompileOptions, GrammarKind
from app.engine.grammars.tools.base import ToolsBuild
from app.export import TARGETS, ExportRequest, Message, export
from app.export.tools import tools_export
from tests.export.test_tools import CASES, TAG

SCHEMA = {"type": "object", "properties": {"id": {"type": "string", "pattern": "^a$"}}}
REFUSED = "HTTP 400: Failed to compile json grammar: JSON Schema at #/properties/id is not ..."


def _schema_request(**extra: Any) -> ExportRequest:
    return ExportRequest(
        kind=GrammarKind.JSON_SCHEMA, source='{"type": "object"}', schema=SCHEMA,
        options=CompileOptions(), preset="maskscope", model="m", raw_prompt="Hi", **extra,
    )  # fmt: skip


def _tools(source: dict[str, Any]) -> ExportRequest:
    """The tools source as the web layer exports it, its tag built."""
    built = ToolsBuild(TAG, None, None, {"vllm": "0.32.0"})
    base = dataclasses.replace(_schema_request(), raw_prompt=None, schema=None)
    return dataclasses.replace(
        base, kind=GrammarKind.STRUCTURAL_TAG, source=json.dumps(TAG),
        messages=(Message("user", "Weather in Oslo?"),), tools=tools_export(source, built),
    )  # fmt: skip


@pytest.mark.parametrize("target", ["sglang", "sglang_openai", "curl_sglang"])
def test_b7_a_refused_stack_gets_the_doctor_s_message_and_no_request(target: str) -> None:
    snippet = export(_schema_request(refusals=(("sglang", REFUSED),)), target)
    assert snippet.refused is not None and REFUSED in snippet.refused
    assert "launch_server" not in snippet.code and "/generate" not in snippet.code
    assert all(line.startswith("#") for line in snippet.code.splitlines())
    assert REFUSED.split(":")[0] in snippet.code


def test_b7_the_other_targets_stay_and_never_send_the_user_to_the_refused_one() -> None:
    req = _schema_request(refusals=(("sglang", REFUSED),))
    kept = [t for t in TARGETS if export(req, t).refused is None]
    assert kept == [t for t in TARGETS if "sglang" not in t]
    fallback = _schema_request(
        refusals=(("sglang", REFUSED),), vllm_fallback="x", vllm_guidance_error="y"
    )
    assert "SGLang" not in export(fallback, "vllm").code
    assert (
        "serve it with SGLang"
        in export(_schema_request(vllm_fallback="x", vllm_guidance_error="y"), "vllm").code
    )


def test_b8_the_vllm_tools_program_prints_the_calls_and_defines_no_unused_tag() -> None:
    code = export(_tools(CASES[0][0]), "vllm").code
    ast.parse(code)
    assert "TAG =" not in code
    assert code.rstrip().endswith("print(completion.choices[0].message.tool_calls)")
    auto = export(_tools({**CASES[0][0], "tool_choice": "auto"}), "vllm").code
    assert "message.tool_calls or completion.choices[0].message.content" in auto
    # a request that does send the tag still defines it
    assert "TAG =" in export(_tools({**CASES[0][0], "builder": "xgrammar", "format": "qwen"}),
                             "vllm").code  # fmt: skip
