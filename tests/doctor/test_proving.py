"""Issue 25: every keyword proven by documents built to break it, each disagreement a finding.

Each witness is checked here the way a user would: jsonschema (the real validator) says which
keyword it breaks, and the grammar's own replay (token by token) says whether it is accepted.
No witness is written by hand: the engines compute them.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from app.doctor import Doctor, DoctorReport, Status
from app.doctor.doctor import DEFAULT_BUDGET_MS, MAX_BUDGET_MS
from app.doctor.judge import CANNOT_JUDGE, Judge
from app.doctor.keywords import error_pointer, resolve_ref
from app.doctor.records import Finding, KeywordFinding
from app.engine import CompileOptions, Engine, GrammarKind, GrammarSpec
from tests.doctor.conftest import counted, examine


def _spec(schema: Any) -> GrammarSpec:
    return GrammarSpec(GrammarKind.JSON_SCHEMA, json.dumps(schema, indent=2), CompileOptions())


def _accepted(engine: Engine, schema: Any, text: str) -> bool:
    result = engine.replay(_spec(schema), text=text)
    return result.accepted and result.complete


def _broken(schema: Any, text: str) -> set[str]:
    """The pointers of the keywords jsonschema says ``text`` breaks."""
    validator = jsonschema.Draft202012Validator(schema)
    return {error_pointer(schema, e.absolute_schema_path) for e in validator.iter_errors(
        json.loads(text))}  # fmt: skip


def _row(report: DoctorReport, pointer: str) -> KeywordFinding:
    return next(k for k in report.keywords if k.pointer == pointer)


def _finding(report: DoctorReport, pointer: str, direction: str) -> Finding:
    found = [f for f in report.findings if pointer in f.pointers and f.direction == direction]
    assert found, report.findings
    return found[0]


TYPELESS = [
    {"uniqueItems": True},
    {"maxItems": 2},
    {"minItems": 1},
    {"maxProperties": 2},
    {"dependentRequired": {"bar": ["foo"]}},
    {"contains": True},
]


@pytest.mark.parametrize("schema", TYPELESS, ids=lambda s: next(iter(s)))
@pytest.mark.parametrize("seed", [0, 1])
def test_a_keyword_without_type_is_broken_by_its_own_witness(
    doctor: Doctor, engine: Engine, schema: dict[str, Any], seed: int
) -> None:
    pointer = "/" + next(iter(schema))
    report = examine(doctor, schema, seed=seed)
    row = _row(report, pointer)
    assert row.status in (Status.IGNORED, Status.WEAKENED), row
    assert row.witness is not None
    assert pointer in _broken(schema, row.witness)
    assert _accepted(engine, schema, row.witness)
    finding = _finding(report, pointer, "grammar_accepts_schema_rejects")
    assert finding.example is not None and finding.count >= 1
    start, end = finding.span or (0, 0)
    assert 0 <= start < end <= len(finding.example)


@pytest.mark.parametrize("schema", [{"enum": [0]}, {"const": 1}], ids=["enum", "const"])
def test_numbers_equal_in_value_written_differently_are_over_restriction(
    doctor: Doctor, engine: Engine, schema: dict[str, Any]
) -> None:
    keyword = next(iter(schema))
    report = examine(doctor, schema)
    finding = _finding(report, f"/{keyword}", "schema_accepts_grammar_refuses")
    assert finding.example is not None
    value = schema["const"] if keyword == "const" else schema["enum"][0]
    assert json.loads(finding.example) == value and finding.example != json.dumps(value)
    assert _broken(schema, finding.example) == set()
    assert not _accepted(engine, schema, finding.example)


def test_an_enum_object_written_with_the_options_spacing_is_over_restriction(
    doctor: Doctor, engine: Engine
) -> None:
    schema = {"enum": [{"a": 1}]}
    report = examine(doctor, schema)
    finding = _finding(report, "/enum", "schema_accepts_grammar_refuses")
    assert "separators" in finding.cause and finding.example is not None
    assert json.loads(finding.example) == {"a": 1}
    assert _broken(schema, finding.example) == set()
    assert not _accepted(engine, schema, finding.example)


def test_non_object_values_under_object_keywords_are_over_restriction(
    doctor: Doctor, engine: Engine
) -> None:
    schema = {"properties": {"foo": {}}, "additionalProperties": False}
    report = examine(doctor, schema)
    finding = _finding(report, "", "schema_accepts_grammar_refuses")
    assert "no type at the root" in finding.cause and "object" in finding.cause
    assert finding.example is not None
    assert not isinstance(json.loads(finding.example), dict)
    assert _broken(schema, finding.example) == set()
    assert not _accepted(engine, schema, finding.example)


def test_a_number_too_large_for_the_validator_is_a_finding_not_an_exception(
    doctor: Doctor, engine: Engine
) -> None:
    schema = {"type": "integer", "multipleOf": 0.123456789}
    huge = 10**400
    with pytest.raises(OverflowError):  # jsonschema itself cannot judge it
        list(jsonschema.Draft202012Validator(schema).iter_errors(huge))
    (error,) = Judge(schema).value(huge)
    assert error.message.startswith(CANNOT_JUDGE) and "OverflowError" in error.message
    report = examine(doctor, schema)
    row = _row(report, "/multipleOf")
    assert row.status is Status.WEAKENED and row.witness is not None
    assert "/multipleOf" in _broken(schema, row.witness)
    assert _accepted(engine, schema, row.witness)


def test_an_anchor_reference_resolves_and_its_keyword_is_examined(
    doctor: Doctor, engine: Engine
) -> None:
    bigint = {"$anchor": "bigint", "maximum": 10}
    schema: dict[str, Any] = {"$ref": "#bigint", "$defs": {"bigint": bigint}}
    assert resolve_ref(schema, "#bigint") == (["$defs", "bigint"], bigint)
    assert error_pointer(schema, ["$ref", "maximum"]) == "/$defs/bigint/maximum"
    report = examine(doctor, schema)
    row = _row(report, "/$defs/bigint/maximum")
    assert row.status in (Status.IGNORED, Status.WEAKENED) and row.witness is not None
    assert "/$defs/bigint/maximum" in _broken(schema, row.witness)
    assert _accepted(engine, schema, row.witness)


def test_raw_control_characters_are_a_not_json_finding(doctor: Doctor, engine: Engine) -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 5}},
              "required": ["name"]}  # fmt: skip
    report = examine(doctor, schema)
    finding = report.findings[0]  # above everything else
    assert finding.direction == "not_json" and finding.keywords == ("maxLength",)
    assert finding.example is not None and finding.span is not None
    with pytest.raises(json.JSONDecodeError, match="control character"):
        json.loads(finding.example)
    assert _accepted(engine, schema, finding.example)
    start, end = finding.span
    assert all(ord(c) < 0x20 for c in finding.example[start:end])
    before, mark, after = finding.parts()
    assert mark.startswith("\\u00")
    assert before + after == finding.example[:start] + finding.example[end:]
    # a keyword whose strings let non-JSON through is weakened, never enforced
    assert _row(report, "/properties/name/maxLength").status is Status.WEAKENED


def test_the_not_row_is_the_keyword_the_user_wrote(doctor: Doctor, engine: Engine) -> None:
    schema = {"type": "integer", "not": {"const": 0}}
    report = examine(doctor, schema)
    assert [k.pointer for k in report.keywords] == ["/type", "/not"]
    row = _row(report, "/not")
    assert row.keyword == "not" and row.status in (Status.IGNORED, Status.WEAKENED)
    assert row.witness is not None and _broken(schema, row.witness) == {"/not"}
    assert _accepted(engine, schema, row.witness)
    finding = _finding(report, "/not", "grammar_accepts_schema_rejects")
    assert finding.keywords == ("not",)


@pytest.mark.parametrize("schema", [
    {"type": "array", "items": {"type": "integer"}, "uniqueItems": True},
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 5}},
     "required": ["name"]},
], ids=["uniqueItems", "maxLength"])  # fmt: skip
def test_findings_do_not_depend_on_the_budget_once_it_is_met(
    doctor: Doctor, schema: dict[str, Any]
) -> None:
    spec = _spec(schema)
    # Both within their counts (time is only the safety stop): the same answer.
    roomy = counted(doctor.examine(spec, seed=0, budget_ms=MAX_BUDGET_MS))
    tight = counted(doctor.examine(spec, seed=0, budget_ms=DEFAULT_BUDGET_MS))
    assert roomy.search is not None and not roomy.search.cut_short
    assert [f.to_dict() for f in roomy.findings] == [f.to_dict() for f in tight.findings]
    assert [k.to_dict() for k in roomy.keywords] == [k.to_dict() for k in tight.keywords]
    # a machine too slow for its budget says so rather than answering as if it were done
    starved = doctor.examine(spec, seed=0, budget_ms=1)
    assert starved.search is not None and starved.search.cut_short


def test_a_keyword_no_document_can_break_says_so(doctor: Doctor) -> None:
    report = examine(doctor, {"type": "array", "minItems": 0, "uniqueItems": False})
    for pointer in ("/minItems", "/uniqueItems"):
        row = _row(report, pointer)
        assert row.witness is None and row.note is not None
        assert row.note.startswith("no witness can be built: ")
