from __future__ import annotations

import json

from app.engine import GrammarKind, GrammarSpec
from app.engine.grammars.validation import validate_output

SCHEMA = {
    "type": "object",
    "properties": {
        "price": {"type": "number", "multipleOf": 0.5},
        "factors": {
            "type": "array",
            "items": {"type": "object", "properties": {"severity": {"enum": ["low", "high"]}}},
        },
        "email": {"type": "string", "format": "email"},
    },
    "required": ["price"],
}
SPEC = GrammarSpec(GrammarKind.JSON_SCHEMA, json.dumps(SCHEMA))


def test_a_valid_output() -> None:
    assert validate_output(SPEC, '{"price": 2.5}', complete=True).valid


def test_each_error_has_its_path() -> None:
    text = '{"price": 2.2, "factors": [{"severity": "low"}, {"severity": "mid"}], "email": "x"}'
    verdict = validate_output(SPEC, text, complete=True)
    assert not verdict.valid
    assert [(e.path, e.message) for e in verdict.errors] == [
        ("$.email", "'x' is not a 'email'"),
        ("$.factors[1].severity", "'mid' is not one of ['low', 'high']"),
        ("$.price", "2.2 is not a multiple of 0.5"),
    ]


def test_output_that_is_not_json() -> None:
    verdict = validate_output(SPEC, '{"price": 2', complete=False)
    assert not verdict.valid
    assert verdict.errors[0].path == "$"
    assert verdict.errors[0].message.startswith("not valid JSON: Expecting ',' delimiter")


def test_grammar_sources_are_valid_when_complete() -> None:
    spec = GrammarSpec(GrammarKind.EBNF, 'root ::= "a"')
    assert validate_output(spec, "a", complete=True).valid
    verdict = validate_output(spec, "", complete=False)
    assert not verdict.valid
    assert verdict.errors[0].message == "the output ends before the grammar does"
