"""Structural tags in the engine: validation with a pointer (xgrammar's own models), the legacy
form, leaves compiled alone to place an error, and a compile in the real worker processes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.engine import CompileOptions, Engine, GrammarKind, GrammarSpec
from app.engine.grammars.structural_tag import TAG_NOT_CARRIED, parse_tag
from app.exceptions import GrammarError


def _tag(fmt: dict[str, Any]) -> str:
    return json.dumps({"type": "structural_tag", "format": fmt}, indent=2)


def _pointer(source: str) -> str | None:
    with pytest.raises(GrammarError) as caught:
        parse_tag(source)
    return caught.value.pointer


def test_a_json_schema_format_is_not_mistaken_for_its_own_field() -> None:
    """pydantic writes ``json_schema`` (the union's tag) then ``json_schema`` (the field)."""
    assert _pointer(_tag({"type": "json_schema", "json_schema": 5})) == "/format/json_schema"


def test_plain_union_member_names_are_dropped() -> None:
    source = _tag({"type": "tag", "begin": 3, "content": {"type": "any_text"}, "end": "x"})
    assert _pointer(source) == "/format/begin"


def test_a_wrong_top_level_type_and_a_non_object() -> None:
    assert _pointer(json.dumps({"type": "tag", "format": {"type": "any_text"}})) == "/type"
    with pytest.raises(GrammarError, match="a structural tag is a JSON object, not a string"):
        parse_tag('"tag"')


def test_the_leaves_are_found_where_the_source_has_them() -> None:
    source = _tag({"type": "or", "elements": [
        {"type": "regex", "pattern": "a+"},
        {"type": "grammar", "grammar": 'root ::= "b"'},
        {"type": "tag", "begin": "<x>", "end": "</x>",
         "content": {"type": "json_schema", "json_schema": {"type": "integer"}}},
    ]})  # fmt: skip
    leaves = {(leaf.parts, leaf.kind) for leaf in parse_tag(source).leaves}
    assert leaves == {
        (("format", "elements", 0, "pattern"), "regex"),
        (("format", "elements", 1, "grammar"), "grammar"),
        (("format", "elements", 2, "content", "json_schema"), "json_schema"),
    }


def test_a_legacy_tag_becomes_triggered_tags() -> None:
    legacy = {"structures": [{"begin": "<f>", "schema": '{"type": "object"}', "end": "</f>"}],
              "triggers": ["<f"]}  # fmt: skip
    parsed = parse_tag(json.dumps(legacy))
    tag = json.loads(parsed.tag_json)
    assert parsed.legacy and tag["format"]["type"] == "triggered_tags"
    assert tag["format"]["tags"][0]["content"]["json_schema"] == {"type": "object"}
    assert not parsed.leaves[0].inside  # a schema given as a string: no pointer inside it
    legacy["structures"][0]["schema"] = "{not json"  # type: ignore[index]
    assert _pointer(json.dumps(legacy)) == "/structures/0/schema"


@pytest.fixture(scope="module")
def compiled(engine: Engine) -> Any:
    def compile_(source: str, **options: Any) -> Any:
        spec = GrammarSpec(GrammarKind.STRUCTURAL_TAG, source, CompileOptions(**options))
        return engine.compile(spec)

    return compile_


def test_the_worker_compiles_a_tag_and_says_no_option_is_carried(compiled: Any) -> None:
    result = compiled(_tag({"type": "tag", "begin": "<n>", "end": "</n>",
                            "content": {"type": "regex", "pattern": "[0-9]{2}"}}))  # fmt: skip
    assert '"<n>"' in result.grammar_text and result.not_carried == TAG_NOT_CARRIED
    assert result.size_bytes > 0 and result.rule_names


def test_a_grammar_leaf_that_does_not_parse_is_placed(compiled: Any) -> None:
    source = _tag({"type": "sequence", "elements": [
        {"type": "const_string", "value": "x"},
        {"type": "grammar", "grammar": "root ::= ("},
    ]})  # fmt: skip
    with pytest.raises(GrammarError) as caught:
        compiled(source)
    assert caught.value.pointer == "/format/elements/1/grammar"
    assert str(caught.value).startswith("grammar leaf:")


def test_an_error_no_leaf_explains_keeps_xgrammar_message(compiled: Any) -> None:
    tag = {"type": "tag", "begin": "<y>", "content": {"type": "any_text"}, "end": "</y>"}
    source = _tag({"type": "triggered_tags", "triggers": ["<x"], "tags": [tag]})
    with pytest.raises(GrammarError, match="does not match any trigger") as caught:
        compiled(source)
    assert caught.value.pointer is None and not str(caught.value).startswith("Check failed")
