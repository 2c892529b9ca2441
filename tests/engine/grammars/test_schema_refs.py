"""The static ``$ref`` walk: references resolve inside the document as JSON Schema resolves them,
anything else is refused by its pointer before anything runs; nothing is fetched or read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.engine.grammars.compile_worker import parse_schema
from app.engine.grammars.jsonschema_safe import error_list, schema_validator
from app.engine.grammars.schema_refs import ReferenceRefused, check_refs

STAYS_INSIDE: list[Any] = [
    {"properties": {"next": {"$ref": "#"}}},
    {"$defs": {"a": {"type": "integer"}}, "$ref": "#/$defs/a"},
    {"definitions": {"a": {"type": "integer"}}, "items": {"$ref": "#/definitions/a"}},
    {"$defs": {"a/b~c": {"type": "integer"}}, "$ref": "#/$defs/a~1b~0c"},
    {"$defs": {"a b": {"type": "integer"}}, "$ref": "#/$defs/a%20b"},
    {"$defs": {"x": {"$anchor": "here"}}, "$ref": "#here"},
    {"$defs": {"x": {"$dynamicAnchor": "node"}}, "items": {"$dynamicRef": "#node"}},
    {"prefixItems": [{"type": "integer"}], "items": {"$ref": "#/prefixItems/0"}},
    {
        "$id": "https://example.com/root.json",
        "$defs": {"s": {"$id": "sub/s.json", "$anchor": "str", "type": "string"}},
        "properties": {
            "a": {"$ref": "sub/s.json"},
            "b": {"$ref": "https://example.com/sub/s.json#str"},
            "c": {"$ref": "https://example.com/root.json#/$defs/s"},
        },
    },
    {
        "$defs": {"s": {"$id": "urn:example:s", "type": "string"}},
        "items": {"$ref": "urn:example:s"},
    },
    {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "definitions": {"a": {"id": "#thing", "type": "integer"}},
        "items": {"$ref": "#thing"},
    },
    # data, not schemas: a "$ref" in a default or an enum is a value like any other
    {"default": {"$ref": "http://127.0.0.1/"}, "enum": [{"$ref": "file:///etc/passwd"}]},
    {"properties": {"$ref": {"type": "string"}, "default": {"$ref": "#/properties/$ref"}}},
    # recursion that descends into the document is fine
    {
        "$defs": {"t": {"properties": {"kids": {"items": {"$ref": "#/$defs/t"}}}}},
        "$ref": "#/$defs/t",
    },
    {"anyOf": [{"type": "null"}, {"type": "array", "items": {"$ref": "#"}}]},
]


@pytest.mark.parametrize("schema", STAYS_INSIDE)
def test_references_inside_the_document_are_accepted(schema: Any) -> None:
    check_refs(schema)
    parse_schema(json.dumps(schema))


REFUSED: list[tuple[Any, str, str]] = [
    ({"$ref": "http://127.0.0.1:9/secret.json"}, "/$ref", "a remote reference"),
    ({"$ref": "https://example.com/s.json#/a"}, "/$ref", "a remote reference"),
    ({"$ref": "file:///etc/passwd"}, "/$ref", "a file: reference"),
    ({"$ref": "file:secret.json"}, "/$ref", "a file: reference"),
    ({"anyOf": [{"type": "integer"}, {"$ref": "file:///x"}]}, "/anyOf/1/$ref", "a file: reference"),
    ({"$ref": "other.json"}, "/$ref", "no $id in the document defines it"),
    ({"$ref": "#/$defs/missing"}, "/$ref", "its target '/$defs/missing' is not in the document"),
    ({"$ref": "#/$defs/a~1b"}, "/$ref", "not in the document"),
    ({"$ref": "#nowhere"}, "/$ref", "no $anchor or $dynamicAnchor 'nowhere'"),
    ({"x-data": [1], "$ref": "#/x-data/0"}, "/$ref", "is not a schema (it is an integer)"),
    ({"items": {"$dynamicRef": "http://127.0.0.1/x#n"}}, "/items/$dynamicRef", "remote"),
    ({"items": {"$ref": "ftp://example.com/s"}}, "/items/$ref", "a remote reference"),
    ({"x-custom": {"$ref": "http://127.0.0.1/"}}, "/x-custom/$ref", "a remote reference"),
    (
        {"$id": "https://example.com/root.json", "$ref": "other.json"},
        "/$ref",
        "a remote reference",
    ),
    ({"allOf": [{"$ref": "#"}]}, "/allOf/0/$ref", "loops back"),
    ({"$ref": "#"}, "/$ref", "loops back"),
    ({"not": {"anyOf": [{"$ref": "#"}]}}, "/not/anyOf/0/$ref", "loops back"),
    (
        {
            "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"if": {"$ref": "#/$defs/a"}}},
            "$ref": "#/$defs/a",
        },
        "/$defs/a/$ref",
        "loops back",
    ),
    ({"$defs": {"x": {"$dynamicAnchor": "n", "allOf": [{"$dynamicRef": "#n"}]}}}, "", "loops"),
]


@pytest.mark.parametrize(("schema", "pointer", "message"), REFUSED)
def test_references_that_leave_the_document_or_loop_in_place_are_refused(
    schema: Any, pointer: str, message: str
) -> None:
    source = json.dumps(schema, indent=2)
    with pytest.raises(ReferenceRefused) as refused:
        parse_schema(source)
    error = refused.value
    if pointer:
        assert error.pointer == pointer
        assert error.message.startswith(f"{pointer}: ")
        assert error.line is not None and error.line > 1
    assert message in error.message
    assert error.to_dict()["code"] == "grammar_invalid"


def test_a_file_reference_is_refused_even_where_validation_would_never_reach_it(
    tmp_path: Path,
) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text('{"const": "TOP-SECRET-CONTENT"}')
    schema = {"anyOf": [{"type": "integer"}, {"$ref": secret.as_uri()}]}
    with pytest.raises(ReferenceRefused) as refused:
        schema_validator(schema)
    assert refused.value.pointer == "/anyOf/1/$ref"
    assert "TOP-SECRET-CONTENT" not in refused.value.message


def test_a_walk_of_deep_nesting_does_not_overflow() -> None:
    schema: Any = {"type": "integer"}
    for _ in range(5000):
        schema = {"items": schema}
    check_refs(schema)
    schema = {"items": schema, "$ref": "file:///x"}
    with pytest.raises(ReferenceRefused):
        check_refs(schema)


def test_validation_too_deep_for_python_is_an_error_not_an_exception() -> None:
    schema: Any = {"type": "integer"}
    for _ in range(3000):
        schema = {"items": schema}
    instance: Any = 1
    for _ in range(3000):
        instance = [instance]
    [error] = error_list(schema_validator(schema), instance)
    assert error.message == "the schema and the document nest too deeply to validate"
