"""The Doctor on the real model's tokenizer and real xgrammar: every case from the issue caught,
witnesses both ways, reproducible search, costs."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.doctor import Doctor, DoctorReport, Status, Verdict
from app.doctor.records import Direction
from app.engine import CompileOptions, GrammarKind, GrammarSpec
from tests.doctor.conftest import examine

OBJECT_AB = {"a": {"type": "integer"}, "b": {"type": "string"}}
#: The cases of the issue: schema, the keyword caught, and the text of a witness it must find.
CASES: dict[str, tuple[dict[str, Any], str, str]] = {
    "required without properties": ({"required": ["a"]}, "/required", "'a' is a required"),
    "additionalProperties beside an anyOf of required lists": (
        {"type": "object", "properties": OBJECT_AB, "additionalProperties": False,
         "anyOf": [{"required": ["a"]}, {"required": ["b"]}]},
        "/additionalProperties", "Additional properties are not allowed",
    ),
    "type object with an enum of strings": (
        {"type": "object", "enum": ["a", "b"]}, "/type", "is not of type 'object'",
    ),
    "oneOf treated as anyOf": (
        {"oneOf": [{"type": "integer"}, {"type": "number"}]}, "/oneOf", "is valid under each of",
    ),
    "uniqueItems": (
        {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, "/uniqueItems",
        "has non-unique elements",
    ),
    "contains": (
        {"type": "array", "items": {"type": "integer"}, "contains": {"const": 5}}, "/contains",
        "does not contain items matching",
    ),
    "not": ({"type": "integer", "not": {"const": 0}}, "/not", "should not be valid under"),
    "if/then": (
        {"type": "object", "properties": OBJECT_AB,
         "if": {"properties": {"a": {"const": 1}}, "required": ["a"]},
         "then": {"required": ["b"]}},
        "/then/required", "'b' is a required property",
    ),
    "an unknown format": ({"type": "string", "format": "iri"}, "/format", "is not a 'iri'"),
}  # fmt: skip


def _finding(report: DoctorReport, pointer: str) -> Any:
    return next(k for k in report.keywords if k.pointer == pointer)


@pytest.mark.parametrize("case", list(CASES))
def test_each_case_from_the_issue_is_caught(doctor: Doctor, case: str) -> None:
    schema, pointer, message = CASES[case]
    report = examine(doctor, schema)
    finding = _finding(report, pointer)
    assert finding.status in (Status.IGNORED, Status.WEAKENED), finding
    assert finding.line is not None  # marked in the editor
    accepted = [w for w in report.witnesses if w.direction is Direction.GRAMMAR_ACCEPTS]
    assert any(message in e.message for w in accepted for e in w.errors), accepted
    assert next(r for r in report.backends if r.backend == "xgrammar").verdict is Verdict.IGNORES


def test_the_issue_enum_of_an_empty_object_is_enforced_by_this_xgrammar(doctor: Doctor) -> None:
    # Reported against an older xgrammar; 0.2.9 writes the grammar `root ::= "{}"`.
    report = examine(doctor, {"enum": [{}]})
    assert _finding(report, "/enum").status is Status.ENFORCED
    assert report.witnesses == ()


def test_an_enum_object_is_written_compact_whatever_the_separators(doctor: Doctor) -> None:
    report = examine(doctor, {"enum": [{"a": 1}]})
    refused = [w for w in report.witnesses if w.direction is Direction.SCHEMA_ACCEPTS]
    assert [(w.text, w.refusal.offset if w.refusal else None) for w in refused] == [
        ('{"a": 1}', 5)  # the grammar wants {"a":1}: the space after the colon is refused
    ]


def test_a_length_bounded_string_refuses_escapes(doctor: Doctor) -> None:
    report = examine(doctor, {"type": "string", "maxLength": 30})
    refused = [w for w in report.witnesses if w.direction is Direction.SCHEMA_ACCEPTS]
    assert refused, "no over-restriction witness"
    for witness in refused:
        assert witness.refusal is not None and witness.text[witness.refusal.offset] == "\\"


def test_the_same_seed_gives_the_same_witnesses(doctor: Doctor) -> None:
    schema = CASES["uniqueItems"][0]
    first, second = examine(doctor, schema, seed=5), examine(doctor, schema, seed=5)
    assert first.search and not first.search.cut_short
    assert [w.to_dict() for w in first.witnesses] == [w.to_dict() for w in second.witnesses]
    assert first.witnesses
    other = examine(doctor, schema, seed=6)
    assert [w.text for w in other.witnesses] != [w.text for w in first.witnesses]


def test_undeclared_properties_refused_by_strict_mode_are_one_message(doctor: Doctor) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    strict = examine(doctor, schema)
    assert not [w for w in strict.witnesses if w.direction is Direction.SCHEMA_ACCEPTS]
    row = next(r for r in strict.backends if r.backend == "xgrammar")
    assert sum("strict_mode" in m.message for m in row.messages) == 1
    loose = examine(doctor, schema, strict_mode=False)
    assert not any("strict_mode" in m.message for r in loose.backends for m in r.messages)


def test_ebnf_and_regex_get_costs_and_the_llguidance_row_only(doctor: Doctor) -> None:
    for kind, source in ((GrammarKind.EBNF, 'root ::= "a" [ ]* "b"'),
                         (GrammarKind.REGEX, "[A-Z]{4}[0-9]{2}")):  # fmt: skip
        report = doctor.examine(GrammarSpec(kind, source), max_tokens=1)
        data = report.to_dict()
        assert (data["keywords"], data["witnesses"], data["search"]) == ([], [], None)
        assert [b["backend"] for b in data["backends"]] == ["llguidance"]
        assert data["costs"]["compile_ms_any_whitespace"] is None
        assert data["costs"]["max_tokens_below_shortest"] is True
    assert report.costs.shortest_document == "NAME00" or report.costs.shortest_document_tokens


@pytest.mark.parametrize(
    ("options", "unbounded"),
    [({}, False), ({"any_whitespace": True}, True),
     ({"any_whitespace": True, "max_whitespace_cnt": 4}, False)],
)  # fmt: skip
def test_unbounded_whitespace_is_found_only_where_the_grammar_allows_it(
    doctor: Doctor, options: dict[str, Any], unbounded: bool
) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    report = examine(doctor, schema, **options)
    assert report.costs.unbounded_whitespace is unbounded
    assert report.costs.compile_ms > 0 and report.costs.compile_ms_any_whitespace is not None
    assert report.costs.shortest_document_tokens is not None


def test_a_max_tokens_below_the_shortest_document_is_flagged(doctor: Doctor) -> None:
    spec = GrammarSpec(GrammarKind.JSON_SCHEMA, json.dumps(CASES["if/then"][0]), CompileOptions())
    low = doctor.examine(spec, max_tokens=1)
    assert low.costs.shortest_document == "{}" and low.costs.max_tokens_below_shortest is True
    assert doctor.examine(spec, max_tokens=50).costs.max_tokens_below_shortest is False
