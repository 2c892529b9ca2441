"""The compile worker's own function, run in-process on a toy vocabulary."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
import xgrammar as xgr

from app.engine.grammars.compile_worker import (
    Held,
    clean_message,
    compile_request,
    compile_threads,
    fetch_request,
    rule_names,
)

OPTIONS = {"any_whitespace": False, "strict_mode": True, "indent": None, "separators": None}


_INFO = xgr.TokenizerInfo(["a", "b", "{", "}", '"', "<eos>"], stop_token_ids=[5])


@pytest.fixture(scope="module")
def compiler() -> xgr.GrammarCompiler:
    return xgr.GrammarCompiler(_INFO, cache_enabled=False)


def _compile(compiler: xgr.GrammarCompiler, kind: str, source: Any) -> dict[str, Any]:
    text = source if isinstance(source, str) else json.dumps(source, indent=2)
    return compile_request(compiler, {"kind": kind, "source": text, "options": OPTIONS})


def test_every_compile_runs_in_the_one_compile_thread_and_its_errors_reach_the_answer(
    compiler: xgr.GrammarCompiler,
) -> None:
    for source in ('root ::= "a"', 'root ::= "b"+', "root ::= ("):
        answer = _compile(compiler, "ebnf", source)
    assert answer["ok"] is False and "EBNF parser error" in answer["error"]["message"]
    assert _compile(compiler, "regex", "[ab]{2}")["ok"] is True
    names = [thread.name for thread in threading.enumerate()]
    assert names.count("maskscope-compile-one") == 1


@pytest.mark.parametrize(("cores", "threads"), [(1, 1), (2, 2), (8, 8), (64, 8)])
def test_xgrammar_gets_no_more_threads_than_cores_and_at_most_its_default(
    cores: int, threads: int
) -> None:
    assert compile_threads(cores) == threads


def test_clean_message_strips_the_log_prefix() -> None:
    line = "[17:22:28] /project/cpp/json_schema_converter.cc:1094: Warning: multipleOf is ignored"
    assert clean_message(line) == "multipleOf is ignored"
    assert clean_message("[09:00:01] /x/grammar_parser.cc:820: EBNF parser error") == (
        "EBNF parser error"
    )


def test_a_compile_reports_grammar_rules_and_size(compiler: xgr.GrammarCompiler) -> None:
    answer = _compile(compiler, "ebnf", 'root ::= "a" item\nitem ::= "b"+')
    assert answer["ok"] is True
    assert "root ::=" in answer["grammar_text"]
    assert "root" in answer["rule_names"] and "item" in answer["rule_names"]
    assert answer["size_bytes"] > 0 and answer["compile_ms"] > 0
    assert answer["warnings"] == []
    assert isinstance(answer["serialized"], str)


@pytest.mark.parametrize(
    ("schema", "warning"),
    [
        (
            {"type": "number", "multipleOf": 3},
            "multipleOf is not supported for type:number; ignoring multipleOf",
        ),
        (
            {"type": "string", "pattern": "a+", "maxLength": 4},
            "pattern combined with minLength/maxLength is not supported; ignoring "
            "minLength/maxLength",
        ),
        (
            {"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 2}]},
            "oneOf with overlapping or non-provably-disjoint branches cannot be represented "
            "exactly; falling back to anyOf semantics",
        ),
    ],
)
def test_xgrammar_warnings_are_captured_per_compile(
    compiler: xgr.GrammarCompiler, schema: dict[str, Any], warning: str
) -> None:
    answer = _compile(compiler, "json_schema", schema)
    assert answer["ok"] is True
    assert answer["warnings"] == [warning]


def _error(answer: dict[str, Any]) -> dict[str, Any]:
    assert answer["ok"] is False
    error: dict[str, Any] = answer["error"]
    return error


def test_invalid_json_gives_line_and_column(compiler: xgr.GrammarCompiler) -> None:
    error = _error(_compile(compiler, "json_schema", '{\n  "type": "object",\n  "x": [1,,2]\n}'))
    assert error["message"] == "invalid JSON: Expecting value"
    assert (error["line"], error["column"]) == (3, 11)


def test_a_schema_must_be_an_object(compiler: xgr.GrammarCompiler) -> None:
    error = _error(_compile(compiler, "json_schema", "[1, 2]"))
    assert error["message"] == "a JSON Schema is an object or a boolean, not an array"


def test_metaschema_errors_carry_a_pointer(compiler: xgr.GrammarCompiler) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "strnig"}}}
    error = _error(_compile(compiler, "json_schema", schema))
    assert error["pointer"] == "/properties/a/type"
    assert error["message"].startswith("not a valid JSON Schema: 'strnig' is not valid")
    assert (error["line"], error["column"]) == (5, 15)


@pytest.mark.parametrize(
    ("schema", "pointer", "message"),
    [
        (
            {"properties": {"n": {"type": "integer", "minimum": 5, "maximum": 1}}},
            "/properties/n",
            "Invalid range: minimum greater than maximum",
        ),
        (
            {"properties": {"list": {"prefixItems": [{"type": "string", "pattern": "[a-"}]}}},
            "/properties/list/prefixItems/0",
            "Regex parsing error at position 4: Unclosed '['",
        ),
    ],
)
def test_xgrammar_schema_errors_are_located(
    compiler: xgr.GrammarCompiler, schema: dict[str, Any], pointer: str, message: str
) -> None:
    error = _error(_compile(compiler, "json_schema", schema))
    assert error["message"] == message
    assert error["pointer"] == pointer
    assert error["line"] > 1


def test_ebnf_errors_give_line_and_column(compiler: xgr.GrammarCompiler) -> None:
    error = _error(_compile(compiler, "ebnf", 'root ::= "a" item\nitem ::= "b" | missing'))
    assert (
        error["message"] == 'EBNF parser error at line 2, column 16: Rule "missing" is not defined'
    )
    assert (error["line"], error["column"]) == (2, 16)


def test_regex_errors_give_the_column(compiler: xgr.GrammarCompiler) -> None:
    error = _error(_compile(compiler, "regex", "ab(cd"))
    assert error["message"] == "Regex parsing error at position 6: The parenthesis is not closed."
    assert (error["line"], error["column"]) == (1, 6)  # the end of the pattern


def test_unknown_kind(compiler: xgr.GrammarCompiler) -> None:
    assert _error(_compile(compiler, "lark", "x"))["message"] == "unknown grammar kind 'lark'"


def test_an_error_message_cut_inside_a_character_is_a_grammar_error(
    compiler: xgr.GrammarCompiler,
) -> None:
    # xgrammar quotes the source cut inside "°", fails to decode its own message, and used to
    # take the worker down with it (every compile then waited for a new worker to start).
    answer = _compile(compiler, "ebnf", "\u00b0\u00fa")
    assert answer["ok"] is False and answer["error"]["code"] == "grammar_invalid"
    assert "EBNF" in answer["error"]["message"]


@pytest.mark.parametrize(
    ("kind", "source"),
    [
        ("ebnf", 'root ::= "a" item\nitem ::= "b"+ | "a" (=("b"))'),
        ("ebnf", 'root ::= "a ::= b" x\nx ::= [a-b]*'),
        ("regex", "(ab|b)+a?"),
        ("json_schema", {"type": "object", "properties": {"a": {"type": "array"}}}),
    ],
)
def test_rule_names_read_from_the_printed_grammar_are_the_rules_by_id(
    compiler: xgr.GrammarCompiler, kind: str, source: Any
) -> None:
    answer = _compile(compiler, kind, source)
    compiled = xgr.CompiledGrammar.deserialize_json(answer["serialized"], _INFO)
    by_id = [rule[0] for rule in json.loads(compiled.grammar.serialize_json())["rules"]]
    assert answer["rule_names"] == by_id
    assert rule_names(answer["grammar_text"]) == by_id


def test_a_held_compile_answers_without_the_grammar_and_a_fetch_brings_it(
    compiler: xgr.GrammarCompiler,
) -> None:
    held = Held(64 * 1024 * 1024)
    request = {"kind": "ebnf", "source": 'root ::= "a" "b"+', "options": OPTIONS, "key": "k1"}
    answer = compile_request(compiler, request, held)
    assert answer["ok"] is True and answer["held"] is True
    assert "serialized" not in answer  # nothing serialised on the compile's path
    fetched = fetch_request(held, {"op": "fetch", "key": "k1"})
    grammar = xgr.CompiledGrammar.deserialize_json(fetched["serialized"], _INFO)
    matcher = xgr.GrammarMatcher(grammar)
    assert matcher.accept_string("abb") and not matcher.accept_string("a")
    assert fetch_request(held, {"op": "fetch", "key": "other"}) == {"ok": True, "missing": True}


def test_held_grammars_past_the_budget_go_least_recent_first(
    compiler: xgr.GrammarCompiler,
) -> None:
    one = compiler.compile_grammar('root ::= "a"')
    held = Held(int(one.memory_size_bytes) * 2)
    for key in ("k1", "k2", "k3"):
        assert held.put(key, compiler.compile_grammar('root ::= "a"'))
    assert held.get("k1") is None and held.get("k2") is not None and held.get("k3") is not None
    assert Held(1).put("big", one) is False  # over the budget alone: the answer carries it


def test_a_schema_invalid_for_its_meta_schema_is_reported_though_it_compiles(
    compiler: xgr.GrammarCompiler,
) -> None:
    answer = _compile(compiler, "json_schema", {"type": "string", "minLength": "two"})
    assert answer["ok"] is False
    assert answer["error"]["message"].startswith("not a valid JSON Schema")
    assert answer["error"]["pointer"] == "/minLength"
    assert "retire" not in answer


@pytest.mark.parametrize("dialect", [{"type": "string"}, 5, ["x"]])
def test_a_schema_whose_dollar_schema_is_not_a_string_is_an_invalid_schema(
    compiler: xgr.GrammarCompiler, dialect: Any
) -> None:
    # jsonschema's draft lookup raised on it (TypeError, AttributeError) and took the worker
    # down: the compile failed as "too complex" and the next waited for a new worker.
    error = _error(_compile(compiler, "json_schema", {"$schema": dialect, "type": "object"}))
    assert error["message"].startswith("not a valid JSON Schema")
    assert error["pointer"] == "/$schema"


def test_an_invalid_schema_is_refused_before_its_compile(compiler: xgr.GrammarCompiler) -> None:
    # The meta-schema check runs first, so xgrammar never sees (nor prints about) the schema.
    answer = _compile(compiler, "json_schema", {"type": "number", "multipleOf": 3, "minimum": "0"})
    assert _error(answer)["pointer"] == "/minimum"
    assert "warnings" not in answer
