"""A compile worker survives any input (issue #46, item 2): every exception in it is its request's
answer, out of memory (xgrammar's ``std::bad_alloc`` while serialising) included, and a worker
found dead is never another request's error. Real worker processes, the real tokenizer."""

from __future__ import annotations

import json
import os
import random
import signal
import string
import time
from collections.abc import Iterator

import pytest

from app.engine import Engine, GrammarCompiler, GrammarKind, GrammarSpec
from app.exceptions import GrammarError, GrammarTooComplex

LONG = "1" * 5000
SCHEMA = '{\n  "type": "object",\n  "properties": {"n": {"type": "integer", "maximum": %s}}\n}'
TAG = (
    '{"type": "structural_tag", "format": {"type": "json_schema",\n'
    ' "json_schema": {"enum": [1, %s]}}}'
)


@pytest.fixture(scope="module")
def compiler(engine: Engine) -> Iterator[GrammarCompiler]:
    """One worker, so that "the same process serves on" is one pid."""
    with GrammarCompiler(engine.model.tokens.info, workers=1) as one:
        yield one


def _served(compiler: GrammarCompiler, tag: str) -> None:
    result = compiler.compile(GrammarSpec(GrammarKind.REGEX, f"[0-9]+{tag}"))
    assert "root ::=" in result.grammar_text


@pytest.mark.parametrize(
    ("kind", "source", "pointer", "line", "column"),
    [
        ("json_schema", SCHEMA % LONG, "/properties/n/maximum", 3, 54),
        ("structural_tag", TAG % LONG, "/format/json_schema/enum/1", 2, 30),
    ],
)
def test_an_integer_past_pythons_limit_is_refused_by_its_pointer_and_the_worker_serves_on(
    compiler: GrammarCompiler, kind: str, source: str, pointer: str, line: int, column: int
) -> None:
    _served(compiler, "a")
    before = compiler.worker_pids()
    with pytest.raises(GrammarError) as caught:
        compiler.compile(GrammarSpec(GrammarKind(kind), source))
    error = caught.value
    assert not isinstance(error, GrammarTooComplex)
    assert (error.pointer, error.line, error.column) == (pointer, line, column)
    assert error.message == f"the integer at {pointer} has 5000 digits; at most 4300 are read"
    _served(compiler, "b")
    assert compiler.worker_pids() == before


def test_a_keyword_probe_of_such_a_schema_is_refused_and_the_worker_serves_on(
    compiler: GrammarCompiler,
) -> None:
    _served(compiler, "c")
    before = compiler.worker_pids()
    spec = GrammarSpec(GrammarKind.JSON_SCHEMA, SCHEMA % LONG)
    with pytest.raises(GrammarError) as caught:
        compiler.probe_keywords(spec, ["/properties/n/maximum"], budget_s=1.0)
    assert caught.value.pointer == "/properties/n/maximum"
    _served(compiler, "d")
    assert compiler.worker_pids() == before


@pytest.mark.parametrize(
    ("kind", "source", "column"),
    [
        ("ebnf", 'root ::= "a\ud800"', 12),
        ("regex", "ab\ud800", 3),
        ("json_schema", '{"type": "string", "pattern": "\ud800"}', 32),
    ],
)
def test_a_lone_surrogate_in_a_source_is_refused_at_its_column_and_the_worker_serves_on(
    compiler: GrammarCompiler, kind: str, source: str, column: int
) -> None:
    before = compiler.worker_pids()
    with pytest.raises(GrammarError) as caught:
        compiler.compile(GrammarSpec(GrammarKind(kind), source))
    assert not isinstance(caught.value, GrammarTooComplex)
    assert caught.value.message.startswith("the source holds U+D800, a lone surrogate")
    assert (caught.value.line, caught.value.column) == (1, column)
    _served(compiler, kind)
    assert compiler.worker_pids() == before


def test_xgrammar_s_check_text_and_its_copy_of_the_source_are_left_out(
    compiler: GrammarCompiler,
) -> None:
    source = json.dumps({"const": "\ud800", "description": "x" * 2000})  # escaped: \\ud800
    with pytest.raises(GrammarError) as caught:
        compiler.compile(GrammarSpec(GrammarKind.JSON_SCHEMA, source))
    message = caught.value.message
    assert message.startswith("Failed to parse JSON: syntax error")
    assert "Check failed" not in message and "x" * 100 not in message


def _wait_dead(pid: int) -> None:
    """Until the process has exited (a kill is not instant: its threads end first), leaving it
    for its parent to reap (``WNOWAIT``)."""
    flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
    while os.waitid(os.P_PID, pid, flags) is None:
        time.sleep(0.01)


def test_a_worker_killed_while_idle_is_replaced_and_the_next_compile_is_served(
    compiler: GrammarCompiler,
) -> None:
    _served(compiler, "e")
    (pid,) = compiler.worker_pids()
    os.kill(pid, signal.SIGKILL)  # as the kernel's OOM killer would
    _wait_dead(pid)
    _served(compiler, "f")  # not "the compiler process died": it was not this compile's doing
    assert compiler.worker_pids() != [pid]


def _big_ebnf(rules: int) -> str:
    """A grammar whose compiled form is about 1 MB and serialises to about 40 MB of JSON: each
    rule's character class splits the vocabulary, so each keeps a token mask."""
    rnd = random.Random(0)
    body = [
        f'r{i} ::= [{"".join(rnd.sample(string.ascii_lowercase, 13))}]+ "{i}"' for i in range(rules)
    ]
    return "root ::= " + " | ".join(f"r{i}" for i in range(rules)) + "\n" + "\n".join(body)


def test_out_of_memory_while_serialising_a_held_grammar_is_its_422_and_no_one_else_s(
    engine: Engine,
) -> None:
    # 128 MB: the compile fits (it needs less than 64), serialising it does not (over 256)
    with GrammarCompiler(engine.model.tokens.info, workers=2, memory_mb=128) as capped:
        result = capped.compile(GrammarSpec(GrammarKind.EBNF, _big_ebnf(200)))
        before = set(capped.worker_pids())
        with pytest.raises(GrammarTooComplex) as caught:
            result.compiled.serialize_json()  # what a session or a replay asks of it first
        assert caught.value.message == (
            "too complex: serialising the compiled grammar (for its token masks) needed more "
            "memory than a compile may use (128 MB)"
        )
        for tag in "ghijk":  # other clients' compiles, one of them on the retired worker's turn
            _served(capped, tag)
        assert len(before - set(capped.worker_pids())) == 1  # the one that held it, retired


@pytest.mark.parametrize(
    ("error", "retire", "message"),
    [
        (MemoryError(), True, "too complex: compiling needed more memory than a compile may "
                              "use (64 MB)"),
        (RuntimeError("std::bad_alloc"), True, "too complex: compiling needed more memory "
                                               "than a compile may use (64 MB)"),
        (RecursionError("maximum recursion depth exceeded"), False,
         "compiling failed: the grammar is nested too deeply"),
        (KeyError("<class 'object'>"), False,
         "compiling failed: an unexpected error (the server's log has it)"),
        (OverflowError("int too large to convert to float"), False,
         "compiling failed: a number in it is out of range"),
    ],
)  # fmt: skip
def test_every_exception_in_a_worker_is_an_answer_in_plain_words(
    error: Exception, retire: bool, message: str
) -> None:
    from app.engine.grammars.compile_worker import failed  # here: the other tests run without it

    answer = failed(error, "compile", 64)
    assert answer["ok"] is False and bool(answer.get("retire")) is retire
    assert answer["error"]["message"] == message
