"""A ``tools`` source exported: vLLM's own request model takes the request and vLLM's own
argument parser takes the serve command (both run in ``.venv-vllm``); SGLang's parser names."""

from __future__ import annotations

import json
import shlex
from typing import Any

import pytest

from app.engine.grammars.spec import CompileOptions, GrammarKind
from app.engine.grammars.tools.base import ToolsBuild
from app.export import TARGETS, ExportRequest, Message, export
from app.export.remote import vllm_tools_command
from app.export.tools import tools_export
from tests.export.conftest import Capture, curl_body, run, unwrapped
from tests.vllm_oracle import run_vllm

WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
        "strict": True,
    },
}
ARGS = WEATHER["function"]["parameters"]
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
TAG = {
    "type": "structural_tag",
    "format": {
        "type": "triggered_tags",
        "triggers": ["<tool_call>"],
        "tags": [
            {
                "type": "tag",
                "begin": '<tool_call>\n{"name": "get_weather", "arguments": ',
                "content": {"type": "json_schema", "json_schema": ARGS},
                "end": "}\n</tool_call>",
            }
        ],
        "at_least_one": True,
        "stop_after_first": True,
    },
}
ANSWER_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "answer", "schema": {"type": "object"}},
}

#: (source, stack reasoning, the serve words expected after the model, the environment).
CASES: list[tuple[dict[str, Any], str | None, list[str], dict[str, str]]] = [
    (
        {"builder": "vllm", "format": "hermes", "tools": [WEATHER, TIME],
         "tool_choice": "required", "reasoning": "disabled", "parallel_tool_calls": False,
         "strict_level": "function", "reasoning_parser": "qwen3",
         "strict_tool_calling": False},
        "mask_everywhere",
        ["--enable-auto-tool-choice", "--tool-call-parser", "hermes",
         "--tool-strict-level", "function", "--reasoning-parser", "qwen3",
         "--structured-outputs-config.enable_in_reasoning", "true"],
        {"VLLM_ENFORCE_STRICT_TOOL_CALLING": "0"},
    ),
    (  # only the flags that apply: auto, parallel, no strict level, no reasoning parser
        {"builder": "vllm", "format": "qwen3_xml", "tools": [WEATHER],
         "tool_choice": "auto", "reasoning": "disabled", "parallel_tool_calls": True,
         "strict_level": "auto", "response_format": ANSWER_FORMAT},
        None,
        ["--enable-auto-tool-choice", "--tool-call-parser", "qwen3_xml"],
        {},
    ),
    (
        {"builder": "vllm", "format": "deepseek_v4", "tools": [TIME],
         "tool_choice": {"type": "function", "function": {"name": "get_time"}},
         "reasoning": "enabled", "parallel_tool_calls": True, "reasoning_parser": "deepseek_v4",
         "strict_tool_calling": True},
        "mask_after_end",
        ["--enable-auto-tool-choice", "--tool-call-parser", "deepseek_v4",
         "--reasoning-parser", "deepseek_v4"],
        {},
    ),
]  # fmt: skip

MESSAGES = (Message("system", "Use the tools."), Message("user", "Weather in Oslo?"))


def _request(
    source: dict[str, Any], stack: str | None = None, tag: Any = TAG, **extra: Any
) -> ExportRequest:
    versions = {"vllm": "0.32.0", "xgrammar": "0.2.8"}
    built = ToolsBuild(tag, None if tag else "no tag: tool_choice auto", None, versions)
    tools = tools_export(source, built, stack_reasoning=stack)
    return ExportRequest(
        kind=GrammarKind.STRUCTURAL_TAG,
        source=json.dumps(tag),
        schema=None,
        options=CompileOptions(),
        preset="maskscope",
        model="Qwen/Qwen3-8B",
        messages=MESSAGES,
        prompt_text="<|im_start|>user\nWeather in Oslo?<|im_end|>\n",
        tools=tools,
        **extra,
    )


def _sent(code: str, capture: Capture, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Any]:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    for url in ("http://localhost:8000", "http://localhost:30000"):
        code = code.replace(f'"{url}', f'"{capture.url}')
    run(code)
    return capture.body()


_ORACLE = """
import json, os, sys
from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
from vllm.reasoning import ReasoningParserManager
from vllm.tool_parsers import ToolParserManager
from vllm.utils.argparse_utils import FlexibleArgumentParser
import vllm.envs as envs

answers = []
for case in json.load(sys.stdin):
    os.environ.pop("VLLM_ENFORCE_STRICT_TOOL_CALLING", None)
    os.environ.update(case["env"])
    request = ChatCompletionRequest.model_validate(case["body"])
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(case["argv"])
    validate_parsed_serve_args(args)
    answers.append({
        "tools": [tool.function.name for tool in request.tools or []],
        "tool_choice": request.tool_choice if isinstance(request.tool_choice, str)
        else request.tool_choice.model_dump(),
        "parallel_tool_calls": request.parallel_tool_calls,
        "structured_outputs": request.structured_outputs is not None,
        "response_format": request.response_format is not None,
        "model": args.model_tag,
        "enable_auto_tool_choice": args.enable_auto_tool_choice,
        "tool_call_parser": args.tool_call_parser,
        "parser_registered": args.tool_call_parser in ToolParserManager.list_registered(),
        "tool_strict_level": args.tool_strict_level,
        "reasoning_parser": args.reasoning_parser,
        "reasoning_registered": not args.reasoning_parser
        or args.reasoning_parser in ReasoningParserManager.list_registered(),
        "enable_in_reasoning": args.structured_outputs_config.enable_in_reasoning,
        "strict_tool_calling": envs.VLLM_ENFORCE_STRICT_TOOL_CALLING,
    })
print(json.dumps(answers))
"""


def _argv(command: str) -> tuple[dict[str, str], list[str]]:
    """The environment and the ``vllm serve`` arguments of a command line."""
    words = shlex.split(command)
    env = {}
    while "=" in words[0]:
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    assert words[:2] == ["vllm", "serve"]
    return env, words[2:]


@pytest.mark.server  # vLLM's own code, run in .venv-vllm: the server tier
def test_vllms_own_request_model_and_argument_parser_take_the_export(
    capture: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    cases = []
    for source, stack, flags, env in CASES:
        req = _request(source, stack)
        command = vllm_tools_command(req)
        assert _argv(command) == (env, ["Qwen/Qwen3-8B", *flags])
        code = export(req, "vllm").code
        assert "$ " + command in code  # the snippet says how to serve, word for word
        assert "its own xgrammar 0.2.8; Maskscope masked with xgrammar 0.2.9" in unwrapped(code)
        path, sent = _sent(code, capture, monkeypatch)
        assert path == "/v1/chat/completions"
        assert sent == curl_body(export(req, "curl_vllm").code)
        assert sent["tools"] == source["tools"] and sent["tool_choice"] == source["tool_choice"]
        assert "structured_outputs" not in sent  # vLLM builds the tag itself from the tools
        cases.append({"body": sent, "argv": _argv(command)[1], "env": env})
    answers = run_vllm(_ORACLE, cases)
    for (source, stack, _, env), answer in zip(CASES, answers, strict=True):
        assert answer == {
            "tools": [t["function"]["name"] for t in source["tools"]],
            "tool_choice": source["tool_choice"],
            "parallel_tool_calls": source["parallel_tool_calls"],
            "structured_outputs": False,
            "response_format": "response_format" in source,
            "model": "Qwen/Qwen3-8B",
            "enable_auto_tool_choice": True,
            "tool_call_parser": source["format"],
            "parser_registered": True,
            "tool_strict_level": source.get("strict_level") or "auto",
            "reasoning_parser": source.get("reasoning_parser") or "",
            "reasoning_registered": True,
            "enable_in_reasoning": stack == "mask_everywhere",
            "strict_tool_calling": env == {},
        }


def test_every_target_answers_for_tools_and_says_what_it_does_not_carry() -> None:
    source = CASES[0][0]
    for req in (_request(source), _request(source, tag=None)):
        for target in TARGETS:
            snippet = export(req, target)
            for line in snippet.not_expressible:
                assert line.split(":")[0] in unwrapped(snippet.code)
    no_tag = _request({**source, "builder": "xgrammar", "format": "qwen"}, tag=None)
    for target in ("vllm", "sglang", "xgrammar", "llguidance"):
        assert any(line.startswith("no structural tag") for line in
                   export(no_tag, target).not_expressible), target  # fmt: skip
    openai = export(_request(source), "openai").not_expressible
    assert any(line.startswith("the tools: this request does not send them") for line in openai)


def test_sglang_gets_the_tools_with_its_own_parser_name_or_the_raw_tag(
    capture: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    qwen_coder = {"builder": "xgrammar", "format": "qwen_3_coder", "tools": [WEATHER],
                  "tool_choice": "required", "reasoning": "disabled",
                  "parallel_tool_calls": True}  # fmt: skip
    code = export(_request(qwen_coder), "sglang_openai").code
    assert "--tool-call-parser qwen3_coder" in code
    path, sent = _sent(code, capture, monkeypatch)
    assert path == "/v1/chat/completions" and sent["tools"] == [WEATHER]
    assert "response_format" not in sent
    hermes = {**qwen_coder, "format": "qwen"}  # an xgrammar key no SGLang parser builds
    path, sent = _sent(export(_request(hermes), "sglang_openai").code, capture, monkeypatch)
    assert sent["response_format"] == TAG and "tools" not in sent
    path, sent = _sent(export(_request(hermes), "sglang").code, capture, monkeypatch)
    assert path == "/generate"
    assert json.loads(sent["sampling_params"]["structural_tag"]) == TAG
