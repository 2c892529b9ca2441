"""The template round trip against vLLM 0.32.0's own code (its builder in .venv-vllm, real
xgrammar, the real Qwen3.6 and DeepSeek V4 tokenizers).

- Qwen3's hermes template (a fixture, with its licence) writes `\\n` between two parallel calls,
  which the hermes tag under `required` refuses, walked by Maskscope's xgrammar and by the
  stack's own backend alike.
- The qwen3.6 template's turns through `qwen3_coder`'s tag, walked by the stack, get the verdict
  an oracle (``roundtrip_oracle.py``: vLLM's tool parser, backend and reasoning parser called the
  obvious way, in vLLM's own environment) gets on the same text.
- DeepSeek V4's turns, rendered by vLLM's own encoder, are accepted by the `deepseek_v4` tag.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from app.doctor.roundtrip import REFUSES_OWN_FORMAT, RoundTrip, minimal_value, round_trip
from app.engine import Engine
from app.engine.factories.tokenizer_only import TokenizerModel
from app.engine.grammars.tools.base import ToolsRequest
from app.engine.grammars.tools.vllm_builder import VllmBuilder
from app.engine.model.chat_templates import ChatTemplate, render, template_for
from app.settings import Settings
from tests.vllm_oracle import run_vllm
from tests.vllm_server import VLLM

pytestmark = pytest.mark.server  # vLLM's tools runner: a real process

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "templates"
ORACLE = Path(__file__).resolve().with_name("roundtrip_oracle.py")
MESSAGES = [{"role": "user", "content": "Use the tools."}]  # the round trip's default
WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    },
}


@pytest.fixture(scope="module")
def settings() -> Settings:
    tmp = Path(tempfile.mkdtemp(prefix="roundtrip-"))
    return Settings(
        db_path=tmp / "p.db",
        compile_workers=1,
        vllm_python=VLLM.parent / "python",
        vllm_timeout_s=600,
    )


@pytest.fixture(scope="module")
def builder(settings: Settings) -> Iterator[VllmBuilder]:
    with VllmBuilder(settings) as built:
        yield built


def _request_for(parser: str, reasoning_parser: str) -> Callable[[bool], ToolsRequest]:
    def request_for(reasoning: bool) -> ToolsRequest:
        return ToolsRequest(
            builder="vllm", format=parser, tools=(WEATHER,), tool_choice="required",
            strict_tool_calling=True, reasoning="enabled" if reasoning else "disabled",
            reasoning_parser=reasoning_parser if reasoning else None,
        )  # fmt: skip

    return request_for


def _tag_for(
    builder: VllmBuilder, parser: str, tokenizer: str, reasoning_parser: str = "qwen3"
) -> Any:
    request_for = _request_for(parser, reasoning_parser)

    def tag_for(reasoning: bool) -> tuple[Any, str | None]:
        built = builder.build(request_for(reasoning), tokenizer)
        assert built.tag is not None, built.reason
        return built.tag, built.reasoning_end

    return tag_for


def _walked(
    engine: Engine[TokenizerModel],
    builder: VllmBuilder,
    template: ChatTemplate,
    parser: str,
    reasoning_parser: str,
    *,
    on_stack: bool,
) -> list[RoundTrip]:
    """The round trip of WEATHER, walked by Maskscope's xgrammar or by the stack's own code."""
    tokenizer = engine.tools.tokenizer
    tag_for = _tag_for(builder, parser, tokenizer, reasoning_parser)
    if not on_stack:
        return round_trip(engine, template, [WEATHER], tag_for)
    return round_trip(
        engine, template, [WEATHER], tag_for, stack=builder, tokenizer=tokenizer,
        request_for=_request_for(parser, reasoning_parser),
    )  # fmt: skip


@pytest.mark.parametrize("on_stack", [False, True], ids=["maskscope", "vllm-0.32.0"])
def test_hermes_two_calls_are_refused_at_the_newline_between_them(
    qwen: Engine[TokenizerModel], builder: VllmBuilder, on_stack: bool
) -> None:
    hermes = ChatTemplate((FIXTURES / "qwen3.jinja").read_text(), "pasted", "Qwen3's template")
    results = _walked(qwen, builder, hermes, "hermes", "qwen3", on_stack=on_stack)
    by_case = {(r.case, r.reasoning): r for r in results}
    assert by_case[("one call get_weather", False)].accepted
    two = by_case[("two parallel calls", False)]
    assert not two.accepted
    # the offset, found here on the rendered text: the `\n` after the first call's end
    assert two.offset == two.text.find("</tool_call>\n<tool_call>") + len("</tool_call>")
    assert two.wrote is not None and two.wrote.startswith("\n<tool_call>")
    assert "<tool_call>" in two.allowed
    finding = two.finding()
    assert finding is not None and finding.startswith(REFUSES_OWN_FORMAT)


def test_the_qwen36_template_through_qwen3_coders_tag_gets_the_oracles_verdict(
    qwen: Engine[TokenizerModel], builder: VllmBuilder
) -> None:
    template = template_for(qwen.model.tokens, shipped="qwen3.6")
    assert template.origin == "shipped" and template.licence == "Apache-2.0"
    results = _walked(qwen, builder, template, "qwen3_coder", "qwen3", on_stack=True)
    assert {r.reasoning for r in results} == {False, True} and len(results) == 4
    tokens = qwen.model.tokens
    cases = []
    for r in results:
        kwargs = {"enable_thinking": r.reasoning, "thinking": r.reasoning}
        prompt = render(template, tokens, MESSAGES, tools=[WEATHER], **kwargs).text
        cases.append(
            {
                "tokenizer": qwen.tools.tokenizer,
                "vocab_size": tokens.vocab_size,
                "format": "qwen3_coder",
                "tools": [WEATHER],
                "tool_choice": "required",
                "reasoning_parser": "qwen3" if r.reasoning else None,
                "chat_template_kwargs": kwargs,
                "prompt": prompt,
                "text": r.text,
            }
        )
    oracle = run_vllm(ORACLE.read_text(), {"cases": cases})["results"]
    for r, said in zip(results, oracle, strict=True):
        # the same ids on both sides: the text's tokens, then the end-of-turn token
        assert said["ids"] == [*tokens.encode(r.text), tokens.tokenizer.eos_token_id]
        label = f"{r.case}, reasoning {r.reasoning}"
        assert (r.accepted, r.token_index) == (said["accepted"], said["refused_at"]), label


def test_deepseek_v4s_turns_rendered_by_vllms_encoder_are_accepted_by_its_tag(
    deepseek: Engine[TokenizerModel], builder: VllmBuilder
) -> None:
    template = template_for(deepseek.model.tokens, shipped="deepseek-v4")
    assert template.text is None and template.mode == "deepseek_v4"  # the stack's encoder
    results = _walked(deepseek, builder, template, "deepseek_v4", "deepseek_v4", on_stack=True)
    assert len(results) == 4
    for r in results:
        assert r.text.count('<｜DSML｜invoke name="get_weather">') == (
            2 if r.case == "two parallel calls" else 1
        )
        assert r.accepted, r.finding()
    reasoned = next(r for r in results if r.reasoning)
    assert reasoned.text.startswith("Let me call the tool.</think>")


@pytest.mark.parametrize(
    ("schema", "value"),
    [
        (
            {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
            {"a": "a"},
        ),
        ({"type": "integer", "minimum": 3}, 3),
        ({"type": "array", "items": {"type": "boolean"}, "minItems": 2}, [True, True]),
        ({"enum": ["x", "y"]}, "x"),
        ({"anyOf": [{"type": "null"}, {"type": "string"}]}, None),
    ],
)  # fmt: skip
def test_a_minimal_value_is_valid_for_its_schema(schema: dict[str, Any], value: Any) -> None:
    assert minimal_value(schema) == value
    jsonschema.validate(value, schema)


@pytest.mark.parametrize("stack", ["maskscope", "vllm-0.32.0"])
def test_the_command_exits_1_on_the_refused_parallel_calls(
    settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str], stack: str
) -> None:
    from app.cli import roundtrip

    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([WEATHER]))
    parser = argparse.ArgumentParser()
    roundtrip.add_arguments(parser)
    args = parser.parse_args(
        ["--tools", str(tools), "--parser", "hermes", "--template",
         str(FIXTURES / "qwen3.jinja"), "--json", "--stack", stack]
    )  # fmt: skip
    assert roundtrip.run(args, settings) == 1
    printed = json.loads(capsys.readouterr().out)
    refused = [r for r in printed if not r["accepted"] and not r["reasoning"]]
    assert [r["case"] for r in refused] == ["two parallel calls"]
