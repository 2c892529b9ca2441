"""Compiles in real worker processes, for the real model's tokenizer."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import xgrammar as xgr

from app.engine import CompileOptions, Engine, GrammarCompiler, GrammarKind, GrammarSpec
from app.exceptions import GrammarError, GrammarTooComplex

MULTIPLE_OF = "multipleOf is not supported for type:number; ignoring multipleOf"
PATTERN_LENGTH = (
    "pattern combined with minLength/maxLength is not supported; ignoring minLength/maxLength"
)
ONE_OF = (
    "oneOf with overlapping or non-provably-disjoint branches cannot be represented exactly; "
    "falling back to anyOf semantics"
)
# About half a second to compile on this machine: long enough to pass a short time limit.
SLOW_SCHEMA = {"type": "string", "pattern": "^([a-z]{1,30}\\.){1,40}[a-z]{2,10}$"}


def _schema(body: dict[str, Any], tag: str) -> GrammarSpec:
    return GrammarSpec(GrammarKind.JSON_SCHEMA, json.dumps({**body, "title": tag}))


def _schema_with(warning: str, tag: str) -> GrammarSpec:
    bodies: dict[str, dict[str, Any]] = {
        MULTIPLE_OF: {"type": "number", "multipleOf": 3},
        PATTERN_LENGTH: {"type": "string", "pattern": "a+", "maxLength": 4},
        ONE_OF: {"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 2}]},
    }
    return _schema(bodies[warning], tag)


def test_a_cache_hit_keeps_the_warnings_and_figures(engine: Engine) -> None:
    spec = _schema_with(MULTIPLE_OF, "cache-hit")
    first = engine.compile(spec)
    again = engine.compile(spec)
    assert first.cached is False and again.cached is True
    assert first.warnings == again.warnings == (MULTIPLE_OF,)
    assert again.compile_ms == first.compile_ms
    assert again.grammar_text == first.grammar_text
    assert first.size_bytes > 0


def test_different_options_are_different_cache_entries(engine: Engine) -> None:
    source = json.dumps({"type": "object", "properties": {"a": {"type": "integer"}}, "title": "o"})
    tight = engine.compile(GrammarSpec(GrammarKind.JSON_SCHEMA, source))
    loose = engine.compile(
        GrammarSpec(GrammarKind.JSON_SCHEMA, source, CompileOptions(any_whitespace=True))
    )
    assert loose.cached is False
    assert loose.grammar_text != tight.grammar_text


def test_concurrent_compiles_keep_their_own_warnings(engine: Engine) -> None:
    warnings = [MULTIPLE_OF, PATTERN_LENGTH, ONE_OF] * 4
    specs = [_schema_with(w, f"concurrent-{i}") for i, w in enumerate(warnings)]
    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(engine.compile, specs))
    assert [r.warnings for r in results] == [(w,) for w in warnings]
    assert not any(r.cached for r in results)


def test_errors_cross_the_process_boundary_typed(engine: Engine) -> None:
    with pytest.raises(GrammarError) as caught:
        engine.compile(GrammarSpec(GrammarKind.EBNF, 'root ::= "a" | b'))
    assert caught.value.message == 'EBNF parser error at line 1, column 16: Rule "b" is not defined'
    assert (caught.value.line, caught.value.column) == (1, 16)


def test_a_compile_past_the_time_limit_is_ended(engine: Engine) -> None:
    with GrammarCompiler(engine.model.tokens.info, workers=1, timeout_s=0.1) as compiler:
        with pytest.raises(GrammarTooComplex) as caught:
            compiler.compile(_schema(SLOW_SCHEMA, "slow"))
        assert "longer than the 0.1 s limit" in caught.value.message
        # the killed worker was replaced: the next compile succeeds
        result = compiler.compile(GrammarSpec(GrammarKind.REGEX, "[0-9]+"))
        assert "root ::=" in result.grammar_text


def _first_mask(compiled: Any, vocab_size: int) -> list[int]:
    matcher = xgr.GrammarMatcher(compiled)
    bitmask = xgr.allocate_token_bitmask(1, vocab_size)
    matcher.fill_next_token_bitmask(bitmask)
    return [int(word) for word in bitmask[0]]


def test_a_held_grammar_masks_as_xgrammars_own_compile(engine: Engine) -> None:
    spec = _schema({"type": "object", "properties": {"n": {"type": "integer"}}}, "held")
    result = engine.compile(spec)
    assert isinstance(result.compiled, xgr.CompiledGrammar)
    tokens = engine.model.tokens
    own = xgr.GrammarCompiler(tokens.info, cache_enabled=False).compile_json_schema(
        spec.source, any_whitespace=False, strict_mode=True
    )
    assert _first_mask(result.compiled, tokens.vocab_size) == _first_mask(own, tokens.vocab_size)
    # the Doctor's worker takes the serialised grammar: the same one, with or without a matcher
    assert json.loads(result.compiled.serialize_json()) == json.loads(own.serialize_json())


def test_a_grammar_whose_worker_was_killed_meanwhile_is_compiled_again_on_use(
    engine: Engine,
) -> None:
    tokens = engine.model.tokens
    with GrammarCompiler(tokens.info, workers=1, timeout_s=0.1) as compiler:
        kept = compiler.compile(GrammarSpec(GrammarKind.REGEX, "[0-9]{2}x"))
        with pytest.raises(GrammarTooComplex):  # kills the one worker, which held ``kept``
            compiler.compile(_schema(SLOW_SCHEMA, "slow-kill"))
        assert xgr.GrammarMatcher(kept.compiled).accept_string("12x")
        assert not xgr.GrammarMatcher(kept.compiled).accept_string("1x")


def test_a_compile_past_the_memory_cap_is_too_complex_and_the_next_compile_works(
    engine: Engine,
) -> None:
    # 4 MB beyond what the worker holds: not one of xgrammar's threads' stacks (8 MB) fits.
    with GrammarCompiler(engine.model.tokens.info, workers=1, memory_mb=4) as compiler:
        with pytest.raises(GrammarTooComplex) as caught:
            compiler.compile(_schema(SLOW_SCHEMA, "memory"))
        # xgrammar's own thread pool may fail to start (the answer says so) or abort the worker
        assert caught.value.message.startswith(
            ("too complex: compiling needed more memory than a compile may use (4 MB",
             "too complex: the compiler process died")
        )  # fmt: skip
        with pytest.raises(GrammarTooComplex):  # a new worker, under the same cap
            compiler.compile(GrammarSpec(GrammarKind.REGEX, "[0-9]+"))
    result = engine.compile(GrammarSpec(GrammarKind.REGEX, "[0-9]+y"))  # the server is fine
    assert "root ::=" in result.grammar_text
