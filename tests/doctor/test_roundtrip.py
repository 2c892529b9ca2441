"""The template round trip against vLLM 0.32.0's own tags (its builder in .venv-vllm, real
xgrammar, the real Qwen3.6 tokenizer): Qwen3's hermes template (a fixture, with its licence)
writes `\\n` between two parallel calls, which the hermes tag under `required` refuses."""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from app.doctor.roundtrip import REFUSES_OWN_FORMAT, minimal_value, round_trip
from app.engine import Engine
from app.engine.factories.tokenizer_only import TokenizerModel, open_tokenizer
from app.engine.grammars.tools.base import ToolsRequest
from app.engine.grammars.tools.vllm_builder import VllmBuilder
from app.engine.model.chat_templates import ChatTemplate, template_for
from app.engine.model.shipped_tokenizers import tokenizer_dir
from app.settings import Settings
from tests.vllm_server import VLLM

pytestmark = pytest.mark.server  # vLLM's tools runner: a real process

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "templates"
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
        stack_runner_dir=tmp / "runners",
    )


@pytest.fixture(scope="module")
def qwen(settings: Settings) -> Iterator[Engine[TokenizerModel]]:
    engine = open_tokenizer(settings, "qwen3.6")
    assert engine is not None
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def builder(settings: Settings) -> Iterator[VllmBuilder]:
    with VllmBuilder(settings) as built:
        yield built


def _tag_for(builder: VllmBuilder, parser: str, tokenizer: str) -> Any:
    def tag_for(reasoning: bool) -> tuple[Any, str | None]:
        request = ToolsRequest(
            builder="vllm", format=parser, tools=(WEATHER,), tool_choice="required",
            strict_tool_calling=True, reasoning="enabled" if reasoning else "disabled",
            reasoning_parser="qwen3" if reasoning else None,
        )  # fmt: skip
        built = builder.build(request, tokenizer)
        assert built.tag is not None, built.reason
        return built.tag, built.reasoning_end

    return tag_for


def test_hermes_two_calls_are_refused_at_the_newline_between_them(
    qwen: Engine[TokenizerModel], builder: VllmBuilder, tmp_path: Path
) -> None:
    hermes = ChatTemplate((FIXTURES / "qwen3.jinja").read_text(), "pasted", "Qwen3's template")
    tokenizer = str(tokenizer_dir("qwen3.6", tmp_path))
    results = round_trip(qwen, hermes, [WEATHER], _tag_for(builder, "hermes", tokenizer))
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


def test_the_qwen36_template_round_trips_through_qwen3_coders_tag(
    qwen: Engine[TokenizerModel], builder: VllmBuilder, tmp_path: Path
) -> None:
    template = template_for(qwen.model.tokens, shipped="qwen3.6")
    assert template.origin == "shipped" and template.licence == "Apache-2.0"
    tokenizer = str(tokenizer_dir("qwen3.6", tmp_path))
    results = round_trip(qwen, template, [WEATHER], _tag_for(builder, "qwen3_coder", tokenizer))
    plain = [r for r in results if not r.reasoning]
    assert plain and all(r.accepted for r in plain), [r.finding() for r in plain]
    # with reasoning, the template writes a blank line after </think>, which the tag under
    # `required` refuses (the batch vLLM logged in PR #46272: newline, </think>, blank line)
    reasoned = [r for r in results if r.reasoning]
    for r in reasoned:
        assert not r.accepted and r.offset == r.text.find("</think>") + len("</think>")


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


def test_the_command_exits_1_on_the_refused_parallel_calls(
    settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from app.cli import roundtrip

    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([WEATHER]))
    parser = argparse.ArgumentParser()
    roundtrip.add_arguments(parser)
    args = parser.parse_args(
        ["--tools", str(tools), "--parser", "hermes", "--template",
         str(FIXTURES / "qwen3.jinja"), "--json"]
    )  # fmt: skip
    assert roundtrip.run(args, settings) == 1
    printed = json.loads(capsys.readouterr().out)
    refused = [r for r in printed if not r["accepted"] and not r["reasoning"]]
    assert [r["case"] for r in refused] == ["two parallel calls"]
