"""Constraint keywords of the reachable schema, and validator paths followed through $ref."""

from __future__ import annotations

import json

import jsonschema

from app.doctor.keywords import constraint_keywords, error_pointer, resolve_ref
from app.examples import EXAMPLES_DIR


def test_only_reachable_subschemas_count_in_document_order() -> None:
    schema = {
        "$defs": {"Used": {"type": "string", "maxLength": 3}, "Unused": {"minimum": 1}},
        "type": "object",
        "title": "annotations are not constraints",
        "properties": {"a": {"$ref": "#/$defs/Used"}, "b": {"items": {"const": 1}}},
        "if": {"required": ["a"]},
    }
    pointers = [k.pointer for k in constraint_keywords(schema)]
    assert pointers == [
        "/$defs/Used/type", "/$defs/Used/maxLength", "/type", "/properties",
        "/properties/a/$ref", "/properties/b/items", "/properties/b/items/const", "/if",
        "/if/required",
    ]  # fmt: skip


def test_a_recursive_reference_is_walked_once() -> None:
    schema = {"$defs": {"Node": {"properties": {"next": {"$ref": "#/$defs/Node"}}}},
              "$ref": "#/$defs/Node"}  # fmt: skip
    assert [k.pointer for k in constraint_keywords(schema)] == [
        "/$defs/Node/properties", "/$defs/Node/properties/next/$ref", "/$ref",
    ]  # fmt: skip


def test_resolve_ref_is_local_only() -> None:
    schema = {"$defs": {"a/b": {"type": "string"}}}
    assert resolve_ref(schema, "#/$defs/a~1b") == (["$defs", "a/b"], {"type": "string"})
    assert resolve_ref(schema, "#/$defs/missing") is None
    assert resolve_ref(schema, "https://example.com/schema.json") is None


def test_a_validator_error_behind_a_ref_points_where_the_keyword_is_written() -> None:
    schema = json.loads((EXAMPLES_DIR / "nested.json").read_text())
    document = {"user": {"id": 0, "profile": {"display_name": "x" * 41,
                "settings": {"theme": "dark", "notifications": True}}}}  # fmt: skip
    errors = jsonschema.Draft202012Validator(schema).iter_errors(document)
    pointers = sorted(error_pointer(schema, e.absolute_schema_path) for e in errors)
    assert pointers == ["/$defs/Profile/properties/display_name/maxLength",
                        "/$defs/User/properties/id/minimum"]  # fmt: skip
