"""llguidance as the session's masking engine, on the real model and the real library."""

from __future__ import annotations

import json

import jsonschema
import pytest
import torch

from app.engine import (
    ChatMessage,
    Engine,
    GrammarKind,
    GrammarSpec,
    MaskingLibrary,
    StopReason,
    with_schema,
)
from app.engine.mask import is_allowed, words_from_bytes
from app.examples import Example, load_examples
from app.exceptions import GrammarError, TokenRefused

LLG = MaskingLibrary.LLGUIDANCE


def _spec(source: str, kind: GrammarKind = GrammarKind.JSON_SCHEMA) -> GrammarSpec:
    return GrammarSpec(kind, source, library=LLG)


@pytest.mark.parametrize("example", load_examples(), ids=lambda e: e.id)
def test_each_example_traces_to_valid_json_under_llguidance(
    engine: Engine, example: Example
) -> None:
    source = example.source()
    system = with_schema(example.system, source) if example.schema_in_prompt else example.system
    session = engine.new_session(
        _spec(source),
        messages=[ChatMessage("system", system), ChatMessage("user", example.prompt)],
        max_tokens=example.max_tokens,
    )
    session.run(example.max_tokens)
    assert session.stop_reason is StopReason.TERMINATED, session.text
    jsonschema.validate(json.loads(session.text), json.loads(source))
    assert all(r.engine == "llguidance" and r.rules == () for r in session.steps)
    # llguidance's mask leaves out non-canonical spellings of forced text ("{" where '{"' is
    # forced) that consume_token still takes: the probe shows those, and only those.
    for record in session.steps:
        assert all(not d.mask and d.accept for d in record.probe.disagree), record.index
    last = session.steps[-1]
    assert last.token_id in engine.model.tokens.stop_ids and last.terminated


def is_allowed_bytes(bitmask: bytes, token_id: int) -> bool:
    """The bit of ``token_id`` in a record's packed bitmask."""
    return is_allowed(torch.from_numpy(words_from_bytes(bitmask).copy()), token_id)


def test_the_bitmask_is_as_wide_as_xgrammars_and_the_stop_token_is_mapped(
    engine: Engine,
) -> None:
    session = engine.new_session(_spec('{"const": 7}'), raw_prompt="x", max_tokens=4)
    first, stop = session.step(), session.step()
    assert len(first.bitmask) == 4 * ((engine.model.tokens.vocab_size + 31) // 32)
    assert first.token_text == "7" and first.jump_forward == "7"
    assert is_allowed_bytes(stop.bitmask, stop.token_id)
    assert stop.token_id in engine.model.tokens.stop_ids
    assert session.stop_reason is StopReason.TERMINATED and session.complete


def test_going_back_and_stepping_again_repeats_the_records(engine: Engine) -> None:
    source = load_examples()[-1].source()
    session = engine.new_session(_spec(source), raw_prompt="A user:", max_tokens=12)
    first = [r.without_timings() for r in session.run(12)]
    session.back(7)
    assert [r.without_timings() for r in session.steps] == first[:5]
    assert [r.without_timings() for r in session.run(7)] == first[5:]


def test_a_refused_force_leaves_the_matcher_usable(engine: Engine) -> None:
    """consume_token of a refused token would put the LLMatcher in an error state for good."""
    session = engine.new_session(_spec('{"type": "integer"}'), raw_prompt="n=", max_tokens=4)
    letter = engine.model.tokens.encode("a")[0]
    with pytest.raises(TokenRefused):
        session.force(letter)
    assert session.force(engine.model.tokens.encode("4")[0]).token_text == "4"
    assert session.step().allowed_count > 0


@pytest.mark.parametrize(
    ("kind", "source", "where"),
    [
        (GrammarKind.JSON_SCHEMA, '{"type": "object",\n "properties": {"a": {"$ref": "#/nope"}}}',
         {"pointer": "/properties/a/$ref", "line": 2}),
        (GrammarKind.JSON_SCHEMA, '{"type": "array",\n "uniqueItems": true}',
         {"pointer": "/uniqueItems", "line": 2}),
        (GrammarKind.JSON_SCHEMA, '{"type": "string", "pattern": "(?=a)"}',
         {"pointer": "/pattern", "line": 1}),
        (GrammarKind.REGEX, "ab(c", {"line": 1, "column": 3}),
        (GrammarKind.EBNF, 'root ::= "a" (', {"line": 1}),
        (GrammarKind.EBNF, 'start: "a" b\n', {"line": 1, "column": 8}),
    ],
)  # fmt: skip
def test_llguidance_refusals_are_located(
    engine: Engine, kind: GrammarKind, source: str, where: dict[str, object]
) -> None:
    with pytest.raises(GrammarError) as caught:
        engine.compile(_spec(source, kind))
    located = caught.value.to_dict()
    assert {k: located.get(k) for k in where} == where, located


def test_ebnf_and_regex_compile_through_llguidance(engine: Engine) -> None:
    ebnf = engine.compile(_spec('root ::= "yes" | "no"', GrammarKind.EBNF))
    regex = engine.compile(_spec("[0-9]{3}", GrammarKind.REGEX))
    assert "start" in ebnf.grammar_text and ebnf.not_carried == ()
    assert regex.compile_ms > 0 and engine.compile(regex.spec).cached
