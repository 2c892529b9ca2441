"""A replay's refusal explained in schema terms: whitespace options, enum, const and bounds."""

from __future__ import annotations

from typing import Any

import pytest

from app.doctor.replay_cause import explain, schema_at
from app.engine import CompileOptions, Rejection

SCHEMA: dict[str, Any] = {
    "$defs": {
        "Factor": {
            "type": "object",
            "properties": {
                "severity": {"enum": ["low", "medium", "high"]},
                "kind": {"const": "risk"},
                "why": {"type": "string", "maxLength": 5},
            },
        }
    },
    "type": "object",
    "properties": {
        "factors": {"type": "array", "items": {"$ref": "#/$defs/Factor"}, "maxItems": 2},
        "odd key": {"anyOf": [{"type": "null"}, {"type": "string", "maxLength": 3}]},
        "tags": {"type": "array", "items": {"enum": ["red", "green"]}},
        "email": {"type": "string", "format": "email"},
        "id": {"type": "string", "pattern": "^[A-Z]{3}$", "maxLength": 8},
        "rating": {"type": "integer", "minimum": 1, "maximum": 10},
    },
}


def _explain(text: str, offset: int, path: str, **options: Any) -> str | None:
    rejection = Rejection(offset=offset, token_index=0, token_text="", expected=())
    cause = explain(schema=SCHEMA, text=text, rejection=rejection, path=path,
                    options=CompileOptions(**options), line_of=None)  # fmt: skip
    return cause.message if cause else None


def test_schema_at_follows_refs_items_and_unions() -> None:
    found = schema_at(SCHEMA, "$.factors[1].severity")
    assert [p for p, _ in found] == ["/$defs/Factor/properties/severity"]
    assert [p for p, _ in schema_at(SCHEMA, "$['odd key']")] == [
        "/properties/odd key", "/properties/odd key/anyOf/0", "/properties/odd key/anyOf/1",
    ]  # fmt: skip
    assert schema_at(SCHEMA, "$.nowhere") == []
    assert schema_at(SCHEMA, "not a path") == []


@pytest.mark.parametrize(
    ("text", "offset", "path", "options", "said"),
    [
        ('{\n  "factors": []}', 1, "$", {}, "a newline at offset 1 is refused by the compile"),
        ('{ "factors": []}', 1, "$", {}, "a space at offset 1"),
        ('{\n  "factors": []}', 1, "$", {"any_whitespace": True}, None),
        ('{"factors": [{"severity": "critical', 26, "$.factors[0].severity", {},
         '$.factors[0].severity must be one of "low" | "medium" | "high" (enum)'),
        ('{"factors": [{"kind": "x', 22, "$.factors[0].kind", {}, 'kind must be "risk"'),
        ('{"factors": [{"why": "abcdef', 27, "$.factors[0].why", {},
         "limited to maxLength 5 characters (it has 5 at the refusal)"),
        ('{"factors": [{}, {}, {}]}', 19, "$.factors[1]", {}, "$.factors holds at most maxItems 2"),
        ('{"factors": [{"why": "ab"', 24, "$.factors[0].why", {}, None),
        # issue 26, problem 11: the index of the item refused, and a format's cause
        ('{"tags": ["red", "blue', 17, "$.tags[1]", {}, '$.tags[1] must be one of "red" | "green"'),
        ('{"email": "not-an-email"}', 23, "$.email", {},
         '$.email must be an email address (format "email"): after "not-an-email" the grammar'
         " refuses the end of the string"),
        # issue 45, B3 and M2: the pattern refused (xgrammar ignores maxLength beside it), a
        # maximum passed; a length bound not reached names nothing
        ('{"id": "abc"', 8, "$.id", {},
         '$.id must match the pattern "^[A-Z]{3}$" (pattern): after "" the grammar refuses "a"'),
        ('{"rating": 11', 12, "$.rating", {},
         'the number at $.rating must be at most 10 (maximum): after "1" the grammar refuses "1"'),
        ('{"factors": [{"why": "abc', 24, "$.factors[0].why", {}, None),
    ],
)  # fmt: skip
def test_a_refusal_is_explained_or_left_alone(
    text: str, offset: int, path: str, options: dict[str, Any], said: str | None
) -> None:
    message = _explain(text, offset, path, **options)
    if said is None:
        assert message is None
    else:
        assert message is not None and said in message


def test_ebnf_and_regex_get_no_cause() -> None:
    rejection = Rejection(offset=0, token_index=0, token_text="", expected=())
    assert (
        explain(schema=None, text=" ", rejection=rejection, path="", options=CompileOptions())
        is None
    )
