"""A witness the grammar accepts and the schema rejects marks the offending value (issue 45, C13):
the value at the path of the schema's first error, found in the text as written."""

from __future__ import annotations

import pytest

from app.doctor.judge import WitnessError
from app.doctor.records import Direction, Witness
from app.doctor.spans import value_span, value_spans

DOC = '{"id": "ABC-12345678", "tags": ["a", "a"], "n": -1.5e3, "w e": {"k": null}}'


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("$", DOC),
        ("$.id", '"ABC-12345678"'),
        ("$.tags", '["a", "a"]'),
        ("$.tags[1]", '"a"'),
        ("$.n", "-1.5e3"),
        ("$['w e']", '{"k": null}'),
        ("$['w e'].k", "null"),
    ],
)
def test_each_value_is_found_by_its_path(path: str, value: str) -> None:
    span = value_span(DOC, path)
    assert span is not None
    assert DOC[span[0] : span[1]] == value


@pytest.mark.parametrize("text", ['{"a": 1', "[1, 2] x", "", '{"a" 1}', "[1,]", '{"a": "\\x"}'])
def test_text_that_is_not_one_json_value_has_no_spans(text: str) -> None:
    assert value_spans(text) == {}


def test_escapes_and_control_characters_keep_code_point_offsets() -> None:
    text = '{"é\\"": "\x01ü", "b": [true]}'
    assert text[slice(*value_spans(text)["$['é\"']"])] == '"\x01ü"'
    assert text[slice(*value_spans(text)["$.b[0]"])] == "true"


def test_a_witness_the_schema_rejects_marks_the_value_at_the_failing_path() -> None:
    witness = Witness(
        Direction.GRAMMAR_ACCEPTS,
        DOC,
        (WitnessError("$.id", "'ABC-12345678' is too long", "/properties/id/maxLength"),),
    )
    before, mark, after = witness.parts()
    assert mark == '"ABC-12345678"'
    assert before + mark + after == DOC
    failing = witness.failing()
    assert failing is not None and failing[0].path == "$.id"


def test_an_error_at_the_document_itself_marks_nothing() -> None:
    witness = Witness(
        Direction.GRAMMAR_ACCEPTS,
        DOC,
        (
            WitnessError("$", "'x' is a required property", "/required"),
            WitnessError("$.tags", "has non-unique elements", "/properties/tags/uniqueItems"),
        ),
    )
    assert witness.parts()[1] == '["a", "a"]'  # the first error naming a value
    root_only = Witness(Direction.GRAMMAR_ACCEPTS, DOC, (WitnessError("$", "required"),))
    assert root_only.parts() == (DOC, "", "") and root_only.failing() is None


def test_a_control_character_in_the_marked_value_is_escaped() -> None:
    text = '{"name": "a\x7fb"}'  # DEL: JSON allows it raw in a string, it has no glyph
    witness = Witness(Direction.GRAMMAR_ACCEPTS, text, (WitnessError("$.name", "bad"),))
    assert witness.parts()[1] == '"a\\u007fb"'
