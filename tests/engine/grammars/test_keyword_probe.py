"""The keyword probe: a schema converted again without each keyword, in a real compile worker."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.engine import Engine, GrammarKind, GrammarSpec
from app.engine.grammars.keyword_probe import without_keyword
from app.exceptions import InvalidInput

PATTERN_LENGTH = (
    "pattern combined with minLength/maxLength is not supported; ignoring minLength/maxLength"
)


def _spec(schema: Any) -> GrammarSpec:
    return GrammarSpec(GrammarKind.JSON_SCHEMA, json.dumps(schema))


def test_without_keyword_copies_and_removes_one_key() -> None:
    schema = {"properties": {"a/b": {"type": "string", "maxLength": 3}}, "anyOf": [{"x": 1}]}
    assert without_keyword(schema, "/properties/a~1b/maxLength") == {
        "properties": {"a/b": {"type": "string"}},
        "anyOf": [{"x": 1}],
    }
    assert without_keyword(schema, "/anyOf/0/x") == {**schema, "anyOf": [{}]}
    assert schema["properties"] == {"a/b": {"type": "string", "maxLength": 3}}  # untouched
    with pytest.raises(KeyError):
        without_keyword(schema, "/properties/missing/type")


def test_an_ignored_keyword_leaves_the_grammar_identical(engine: Engine) -> None:
    schema = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}
    probe = engine.compiler.probe_keywords(
        _spec(schema), ["/uniqueItems", "/items", "/items/type"], budget_s=10
    )
    identical = {p.pointer: p.identical for p in probe.probes}
    assert identical == {"/uniqueItems": True, "/items": False, "/items/type": False}
    assert not probe.cut_short


def test_a_warning_vanishes_with_the_keyword_it_is_about(engine: Engine) -> None:
    schema = {"type": "string", "pattern": "a+", "maxLength": 4}
    probe = engine.compiler.probe_keywords(_spec(schema), ["/pattern", "/maxLength"], budget_s=10)
    assert probe.warnings == (PATTERN_LENGTH,)
    gone = {p.pointer: p.warnings for p in probe.probes}
    assert gone == {"/pattern": (PATTERN_LENGTH,), "/maxLength": (PATTERN_LENGTH,)}
    assert not next(p for p in probe.probes if p.pointer == "/pattern").identical


def test_the_time_bound_cuts_the_probe_short(engine: Engine) -> None:
    schema = {"properties": {f"p{i}": {"type": "string", "maxLength": i + 1} for i in range(40)}}
    pointers = [f"/properties/p{i}/maxLength" for i in range(40)]
    probe = engine.compiler.probe_keywords(_spec(schema), pointers, budget_s=0.0)
    assert probe.cut_short and len(probe.probes) < 40


def test_only_json_schemas_have_keywords(engine: Engine) -> None:
    with pytest.raises(InvalidInput, match="only JSON Schemas"):
        engine.compiler.probe_keywords(GrammarSpec(GrammarKind.REGEX, "a+"), ["/type"], budget_s=1)
