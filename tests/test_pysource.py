"""Parsing Python source: a parse that another parse interrupts is tried again."""

from __future__ import annotations

import ast
import gc
from collections.abc import Callable

import pytest

from app.pysource import parse_expression, parse_module

MODULE = "\n".join(f"class M{k}:\n    f: list[dict[str, int]] = {k}" for k in range(300))
EXPRESSION = "[" + ", ".join(f"f{k}(a, b[c])" for k in range(1000)) + "]"


class _ParsesWhenCollected:
    """Garbage in a cycle whose finalizer parses: a collection during a parse runs it."""

    def __init__(self) -> None:
        self.cycle = self

    def __del__(self) -> None:
        ast.parse("x = 1")


def _interrupted(parse: Callable[[], object], tries: int = 20) -> list[str]:
    """Run ``parse`` with such garbage pending each time; the errors it raised."""
    errors = []
    gc.collect()
    for _ in range(tries):
        for _ in range(200):
            _ParsesWhenCollected()
        try:
            parse()
        except SystemError as error:
            errors.append(str(error))
    gc.collect()
    return errors


RAW = {
    "module": lambda: ast.parse(MODULE),
    "expression": lambda: ast.parse(EXPRESSION, mode="eval"),
}
RETRIED = {
    "module": lambda: parse_module(MODULE, "<schema>"),
    "expression": lambda: parse_expression(EXPRESSION),
}


@pytest.mark.parametrize("mode", RAW)
def test_ast_parse_is_interrupted_so_the_retry_is_tested(mode: str) -> None:
    # CPython 3.11's interpreter-wide recursion counter (gh-106905).
    errors = _interrupted(RAW[mode])
    assert errors, "no parse was interrupted: the test below would prove nothing"
    assert "AST constructor recursion depth mismatch" in errors[0]


@pytest.mark.parametrize("mode", RETRIED)
def test_an_interrupted_parse_is_tried_again(mode: str) -> None:
    assert _interrupted(RETRIED[mode]) == []


def test_a_syntax_error_is_still_raised() -> None:
    with pytest.raises(SyntaxError):
        parse_module("class :", "<schema>")
