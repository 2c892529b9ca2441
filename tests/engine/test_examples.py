"""Each example schema, traced greedily on the real model, ends in output that validates."""

from __future__ import annotations

import json

import jsonschema
import pytest

from app.engine import ChatMessage, Engine, GrammarKind, GrammarSpec, StopReason, with_schema
from app.examples import Example, load_examples

EXAMPLES = load_examples()


def test_there_are_the_five_patterns() -> None:
    assert {e.id for e in EXAMPLES} == {"pricing", "router", "candidate", "risk", "nested"}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.id)
def test_the_example_traces_to_valid_output(engine: Engine, example: Example) -> None:
    source = example.source()
    system = with_schema(example.system, source) if example.schema_in_prompt else example.system
    session = engine.new_session(
        GrammarSpec(GrammarKind.JSON_SCHEMA, source),
        messages=[ChatMessage("system", system), ChatMessage("user", example.prompt)],
        max_tokens=example.max_tokens,
    )
    session.run(example.max_tokens)
    assert session.stop_reason is StopReason.TERMINATED, session.text
    jsonschema.validate(json.loads(session.text), json.loads(source))
    validation = session.validation()
    assert validation is not None and validation.valid
    assert all(r.mask_accept_agree for r in session.steps)
