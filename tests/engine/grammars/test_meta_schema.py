"""The fast meta-schema checks against jsonschema itself: a yes from them is a yes from it."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from app.engine.grammars import meta_schema
from app.engine.grammars.jsonschema_safe import error_list, meta_validator
from app.engine.grammars.meta_schema import MAX_DEPTH, known_valid

ROOT = Path(__file__).resolve().parents[3]
DRAFTS = {
    "draft-04": "http://json-schema.org/draft-04/schema#",
    "draft-06": "http://json-schema.org/draft-06/schema#",
    "draft-07": "http://json-schema.org/draft-07/schema#",
    "2019-09": "https://json-schema.org/draft/2019-09/schema",
    "2020-12": "https://json-schema.org/draft/2020-12/schema",
}
_BASE = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "pattern": "^[a-z]+$"},
        "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        "n": {"type": ["integer", "null"], "minimum": 0},
        "kind": {"enum": ["a", "b"]},
        "any": {"anyOf": [{"$ref": "#/definitions/x"}, {"type": "boolean"}]},
    },
    "patternProperties": {"^x-": {"type": "string"}},
    "additionalProperties": False,
    "required": ["name"],
    "definitions": {"x": {"type": "number", "multipleOf": 2}},
}
_KEYWORDS = [
    "type", "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "multipleOf", "required", "enum", "const", "items", "prefixItems",
    "additionalItems", "properties", "additionalProperties", "patternProperties",
    "propertyNames", "dependencies", "dependentRequired", "dependentSchemas", "allOf", "anyOf",
    "oneOf", "not", "if", "then", "else", "$ref", "$id", "id", "$anchor", "$dynamicAnchor",
    "$dynamicRef", "$recursiveAnchor", "$recursiveRef", "$defs", "definitions", "format",
    "pattern", "uniqueItems", "minItems", "maxItems", "contains", "minContains", "title",
    "default", "examples", "readOnly", "deprecated", "contentMediaType", "$comment",
    "unevaluatedProperties", "unevaluatedItems", "minProperties", "$vocabulary", "$schema",
]  # fmt: skip
_VALUES: list[Any] = [
    -1, 0, 1, 1.5, 2.0, True, False, None, "x", "string", "strnig", "^a", "(", "#a", "a#b#",
    "#/definitions/x", "", [], ["a"], ["a", "a"], ["string", "null"], [1, True], [1, 1.0],
    [{}], [{"type": "x"}], [[]], {}, {"a": 1}, {"a": ["b"]}, {"a": {}}, {"type": "x"},
    {"type": "string"}, {"(": {}}, {"a": {"type": 3}}, {"https://x/v": True},
]  # fmt: skip


def _jsonschema_valid(schema: Any) -> bool:
    return not error_list(meta_validator(schema), schema)


def _nodes(node: Any) -> list[Any]:
    found = []
    if isinstance(node, dict):
        found.append(node)
        for value in node.values():
            found.extend(_nodes(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(_nodes(value))
    return found


def _mutants(seed: int, count: int) -> list[Any]:
    rng = random.Random(seed)
    mutants = []
    for _ in range(count):
        schema = copy.deepcopy(_BASE)
        draft = rng.choice([None, *DRAFTS.values()])
        for _ in range(rng.randint(1, 3)):
            rng.choice(_nodes(schema))[rng.choice(_KEYWORDS)] = copy.deepcopy(rng.choice(_VALUES))
        if draft is not None:
            schema["$schema"] = draft
        mutants.append(schema)
    return mutants


def test_every_draft_jsonschema_has_is_covered() -> None:
    # A draft whose meta-schema used a keyword the checks lack would always take the slow path.
    for draft in DRAFTS.values():
        base = jsonschema.validators.validator_for({"$schema": draft})
        assert meta_schema._checks_for(base) is not None, draft


def test_the_realworld_and_example_schemas_are_known_valid() -> None:
    sources = [e["source"] for e in json.loads((ROOT / "bench/data/realworld_schemas.json")
                                               .read_text())["schemas"]]  # fmt: skip
    sources += [path.read_text() for path in (ROOT / "schemas").glob("*.json")]
    schemas = [json.loads(source) for source in sources]
    schemas = [s for s in schemas if isinstance(s, dict) and _jsonschema_valid(s)]
    assert len(schemas) > 60
    assert [s.get("$schema") for s in schemas if not known_valid(s)] == []


@pytest.mark.parametrize("seed", range(4))
def test_a_mutated_schema_is_known_valid_exactly_when_jsonschema_finds_no_error(seed: int) -> None:
    verdicts = [(m, known_valid(m), _jsonschema_valid(m)) for m in _mutants(seed, 250)]
    assert [m for m, fast, valid in verdicts if fast and not valid] == []
    # The other way costs only time (jsonschema is asked); the checks should rarely need it.
    undecided = [m for m, fast, valid in verdicts if valid and not fast]
    assert len(undecided) <= len(verdicts) // 50, undecided[:3]
    assert 0 < sum(valid for _, _, valid in verdicts) < len(verdicts)  # both verdicts tried


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "integer", "minimum": 1.0},
        {"$schema": DRAFTS["draft-04"], "properties": {"a": {"minLength": 1.0}}},
        {"$schema": DRAFTS["draft-04"], "minimum": 0, "exclusiveMinimum": True},
        {"$schema": DRAFTS["draft-04"], "exclusiveMinimum": True},
        {"$schema": DRAFTS["draft-07"], "$ref": "#/definitions/a", "type": 5},
        {"$ref": "#/$defs/a", "type": 5, "$defs": {"a": {}}},
        {"enum": [1, True]},
        {"enum": [[1], [1.0]]},
        {"type": ["string", "string"]},
        {"required": ["a", "a"]},
        {"$anchor": "a b"},
        {"$id": "a#b"},
        {"patternProperties": {"(a)\\1": {}}},
        {"properties": {"a": {"pattern": "(?<=a)b"}}},
        {"$schema": DRAFTS["2019-09"], "items": [{"type": "x"}]},
        {"$schema": DRAFTS["draft-04"], "items": True},
        {"multipleOf": 0},
        {"$schema": DRAFTS["draft-04"], "multipleOf": 0},
        {"dependentRequired": {"a": [1]}},
        {"$schema": "http://json-schema.org/draft-03/schema#", "type": "object"},
        {"$schema": "https://example.com/unknown", "type": 5},
        True,
        False,
    ],
)
def test_edge_cases_agree_with_jsonschema(schema: Any) -> None:
    assert not known_valid(schema) or _jsonschema_valid(schema)
    if known_valid(schema) != _jsonschema_valid(schema):  # only a slow path, never a wrong one
        assert not known_valid(schema)


def _nested(levels: int) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        node = {"items": node}
    return node


def test_a_document_nested_past_the_bound_is_left_to_jsonschema() -> None:
    assert known_valid(_nested(MAX_DEPTH - 1))
    assert not known_valid(_nested(MAX_DEPTH + 1))
    # At the bound jsonschema itself still walks the whole document (its stack holds).
    for draft in DRAFTS.values():
        schema = {**_nested(MAX_DEPTH), "$schema": draft}
        assert _jsonschema_valid(schema), draft
