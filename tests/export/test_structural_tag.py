"""Structural tags exported: the xgrammar and llguidance snippets build the grammars Maskscope
shows, and vLLM's own request model (in ``.venv-vllm``) takes the raw tag request."""

from __future__ import annotations

import dataclasses
import json

import pytest

from app.engine import Engine, GrammarKind, GrammarSpec, MaskingLibrary
from app.engine.grammars.structural_tag import parse_tag
from app.export import export
from tests.export.conftest import (
    Capture,
    curl_body,
    make_request,
    run,
    run_until,
    spec_of,
    unwrapped,
)
from tests.vllm_oracle import run_vllm

TAG = {
    "type": "structural_tag",
    "format": {
        "type": "tag",
        "begin": "<call>",
        "content": {"type": "json_schema", "json_schema": {"type": "object"}},
        "end": "</call>",
    },
}


def test_the_xgrammar_snippet_compiles_the_tag_maskscope_shows(engine: Engine) -> None:
    req = make_request(engine, kind=GrammarKind.STRUCTURAL_TAG, source=json.dumps(TAG))
    snippet = export(req, "xgrammar")
    assert snippet.not_expressible == ()
    compiled = run_until(snippet.code, "compiled")
    assert str(compiled.grammar) == engine.compile(spec_of(req)).grammar_text


LEGACY = {
    "structures": [
        {"begin": "<function=weather>", "schema": {"type": "object"}, "end": "</function>"}
    ],
    "triggers": ["<function="],
}


def test_the_llguidance_snippet_of_a_legacy_tag_builds_maskscopes_llguidance_grammar(
    engine: Engine,
) -> None:
    source = json.dumps(LEGACY)
    converted = parse_tag(source).tag_json  # what the export service hands on
    req = dataclasses.replace(
        make_request(engine, kind=GrammarKind.STRUCTURAL_TAG, source=converted), legacy_tag=LEGACY
    )
    snippet = export(req, "llguidance")
    assert snippet.not_expressible == ()
    spec = GrammarSpec(GrammarKind.STRUCTURAL_TAG, source, library=MaskingLibrary.LLGUIDANCE)
    assert run_until(snippet.code, "grammar") == engine.compile(spec).grammar_text
    assert "the arguments are any JSON" in unwrapped(snippet.code)


_ORACLE = """
import json, sys
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
answers = []
for body in json.load(sys.stdin):
    request = ChatCompletionRequest.model_validate(body)
    answers.append(json.loads(request.structured_outputs.structural_tag))
print(json.dumps(answers))
"""


@pytest.mark.server  # vLLM's own code, run in .venv-vllm: the server tier
def test_vllms_own_request_model_takes_the_raw_tag_request(
    engine: Engine, capture: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    bodies = []
    for tag in (TAG, LEGACY):
        source = parse_tag(json.dumps(tag)).tag_json  # a legacy tag comes converted
        req = make_request(engine, kind=GrammarKind.STRUCTURAL_TAG, source=source)
        run(export(req, "vllm").code.replace('"http://localhost:8000', f'"{capture.url}'))
        path, sent = capture.body()
        assert path == "/v1/chat/completions" and sent == curl_body(export(req, "curl_vllm").code)
        bodies.append(sent)
    assert run_vllm(_ORACLE, bodies) == [TAG, json.loads(parse_tag(json.dumps(LEGACY)).tag_json)]
