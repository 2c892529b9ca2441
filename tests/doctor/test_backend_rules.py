"""Every reproduced rule of vLLM, SGLang and OpenAI's strict mode, pinned to a schema that trips
it (and the examples, which trip none of vLLM's)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.doctor.backends import openai_strict, sglang, vllm
from app.doctor.records import BackendRow, Verdict
from app.examples import EXAMPLES_DIR

STRICT = {"type": "object", "additionalProperties": False}


@pytest.mark.parametrize(
    ("rule", "schema"),
    [
        ("multipleOf", {"type": "integer", "multipleOf": 3}),
        ("array_keywords", {"type": "array", "uniqueItems": True}),
        ("array_keywords", {"type": "array", "contains": {"const": 1}}),
        ("array_keywords", {"type": ["array", "null"], "minContains": 1}),
        ("format", {"type": "string", "format": "iri"}),
        ("pattern_length", {"type": "string", "pattern": "a+", "maxLength": 3}),
        ("pattern_length", {"type": "string", "format": "email", "minLength": 3}),
        ("propertyNames_length",
         {"type": "object", "propertyNames": {"pattern": "^a", "maxLength": 3}}),
        ("propertyNames_patternProperties",
         {"type": "object", "propertyNames": {}, "patternProperties": {"^a": {}}}),
        ("propertyNames_properties", {"type": "object", "propertyNames": {}, "properties": {}}),
        ("propertyNames_unevaluated",
         {"type": "object", "propertyNames": {}, "unevaluatedProperties": False}),
        ("patternProperties_properties",
         {"type": "object", "patternProperties": {"^a": {}}, "properties": {}}),
        ("patternProperties_several",
         {"type": "object", "patternProperties": {"^a": {}, "^b": {}}}),
        ("allOf", {"allOf": [{"type": "string"}, {"enum": ["yes", "no"]}]}),
    ],
)  # fmt: skip
def test_each_vllm_rule_trips_on_its_schema(rule: str, schema: dict[str, Any]) -> None:
    tripped = {r.name for r in vllm.RULES if r.applies(schema)}
    assert rule in tripped
    nested = {"type": "object", "properties": {"x": schema}}
    assert [m.pointer for m in vllm.unsupported(nested)] == ["/properties/x"] * len(tripped)


@pytest.mark.parametrize("name", ["pricing", "router", "candidate", "risk", "nested"])
def test_the_examples_pass_vllms_precheck(name: str) -> None:
    schema = json.loads((EXAMPLES_DIR / f"{name}.json").read_text())
    assert vllm.unsupported(schema) == []
    row = vllm.assess(schema, converts=True, guidance_error=lambda _: "", xgrammar_ignores=False)
    assert row.verdict is Verdict.OK


def _vllm(schema: Any, *, guidance: str = "", converts: bool = True) -> BackendRow:
    return vllm.assess(schema, converts=converts, guidance_error=lambda _: guidance,
                       xgrammar_ignores=False)  # fmt: skip


def test_vllm_auto_falls_back_to_guidance_or_outlines_or_refuses() -> None:
    fallback = _vllm({"type": "number", "multipleOf": 0.5})
    assert fallback.verdict is Verdict.FALLS_BACK
    assert any("falls back to guidance" in m.message for m in fallback.messages)
    assert any("'xgrammar' forced: HTTP 400" in m.message for m in fallback.messages)
    refused = _vllm({"type": "array", "uniqueItems": True}, guidance="Unimplemented keys")
    assert refused.verdict is Verdict.REFUSES
    assert any("which refuses it: HTTP 400: Grammar error" in m.message for m in refused.messages)
    outlines = _vllm({"type": "object", "patternProperties": {"^a": {}, "^b": {}}})
    assert outlines.verdict is Verdict.FALLS_BACK
    assert any("outlines" in m.message for m in outlines.messages)
    assert _vllm({"type": "string"}, converts=False).verdict is Verdict.FALLS_BACK


def test_vllm_refuses_a_schema_nested_64_levels_deep() -> None:
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(31):  # each level is an object inside "properties": two containers
        deep = {"type": "object", "properties": {"a": deep}}
    assert _vllm(deep).verdict is Verdict.OK  # depth 62
    deeper = {"type": "object", "properties": {"a": deep}}  # depth 64
    row = _vllm(deeper)
    assert row.verdict is Verdict.REFUSES and "nested too deeply" in row.messages[0].message


@pytest.mark.parametrize(
    ("schema", "pointer", "reason"),
    [
        ({"not": {"type": "null"}}, "#", "keyword(s) not would be ignored"),
        ({"if": {}, "then": {}, "else": {}}, "#", "keyword(s) else, if, then would be ignored"),
        ({"dependentRequired": {"a": ["b"]}}, "#", "keyword(s) dependentRequired"),
        ({"dependentSchemas": {"a": {}}}, "#", "keyword(s) dependentSchemas"),
        ({"multipleOf": 2}, "#", "keyword(s) multipleOf"),
        ({"uniqueItems": True}, "#", "keyword(s) uniqueItems"),
        ({"items": {"contains": {}, "maxContains": 2, "minContains": 1}}, "#/items",
         "keyword(s) contains, maxContains, minContains"),
        ({"properties": {"a/b": {"format": "iri"}}}, "#/properties/a~1b",
         "string format 'iri' is not implemented"),
        ({"type": "string", "pattern": "a", "maxLength": 2}, "#",
         "constraints pattern, minLength/maxLength cannot be enforced together"),
        ({"$defs": {"X": {"format": "email", "pattern": "@"}}}, "#/$defs/X",
         "constraints format, pattern cannot be enforced together"),
    ],
)  # fmt: skip
def test_each_sglang_rule_refuses_with_its_pointer(
    schema: dict[str, Any], pointer: str, reason: str
) -> None:
    found = sglang.failures(schema)
    assert any(p == pointer and r.startswith(reason) for p, r in found), found
    row = sglang.assess(schema, xgrammar_ignores=False)
    assert row.verdict is Verdict.REFUSES
    assert row.messages[0].message.startswith("HTTP 400: Failed to compile json grammar")


def test_sglang_reads_no_instance_data_and_accepts_the_examples() -> None:
    assert sglang.failures({"enum": [{"not": 1}], "const": {"uniqueItems": True}}) == []
    assert sglang.failures({"type": "integer", "format": "iri"}) == []  # not a string schema
    for name in ("pricing", "router", "candidate", "risk", "nested"):
        assert sglang.failures(json.loads((EXAMPLES_DIR / f"{name}.json").read_text())) == []


def _strict(properties: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {**STRICT, "properties": properties, "required": list(properties), **extra}


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ({"type": "object", "properties": {}}, "additionalProperties: false"),
        (_strict({"a": {"type": "string"}}, required=[]), "not required: a"),
        ({"anyOf": [STRICT]}, "root must be an object"),
        (_strict({}, allOf=[]), "allOf is not supported"),
        (_strict({"a": {"not": {"type": "null"}}}), "not is not supported"),
        (_strict({"a": {"if": {}, "then": {}}}), "if is not supported"),
        (_strict({}, dependentRequired={}), "dependentRequired is not supported"),
        (_strict({}, dependentSchemas={}), "dependentSchemas is not supported"),
        (_strict({"a": {"type": "string", "format": "uri"}}), "format 'uri' is not supported"),
        (_strict({"a": {"enum": list(range(1001))}}), "1001 enum values; the limit is 1000"),
        (_strict({f"p{i}": {"type": "string"} for i in range(5001)}),
         "5001 object properties; the limit is 5000"),
        (_strict({"a": {"enum": ["x" * 60] * 251}}), "an enum of 251 values holds 15060"),
        (_strict({"a": {"const": "y" * 120_001}}), "characters of names, enum and const values"),
    ],
)  # fmt: skip
def test_each_openai_strict_rule_refuses(schema: dict[str, Any], expected: str) -> None:
    found = openai_strict.violations(schema)
    assert any(expected in m.message for m in found), found
    assert openai_strict.assess(schema).verdict is Verdict.REFUSES


def test_openai_strict_counts_nesting_through_references() -> None:
    deep: dict[str, Any] = _strict({})
    for _ in range(9):
        deep = _strict({"a": deep})
    assert openai_strict.violations(deep) == []  # 10 levels
    too_deep = {**_strict({"a": {"$ref": "#/$defs/D"}}), "$defs": {"D": deep}}
    assert [m.message for m in openai_strict.violations(too_deep)] == [
        "11 levels of nested objects; the limit is 10"
    ]
    assert openai_strict.assess(deep).verdict is Verdict.OK
