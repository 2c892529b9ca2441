"""Parsing Python source in a process with threads.

CPython 3.11 keeps the AST constructor's recursion depth in interpreter-wide state (gh-106905),
so a parse interrupted by another parse fails with ``SystemError: AST constructor recursion
depth mismatch``, though its source is fine. The other parse may be another thread's (the
``traceback`` module parses a frame's line to underline it whenever a traceback is formatted,
so any logged error can do it) or a finalizer's, run by a garbage collection during this one.
The parse is deterministic, so it is tried again.
"""

from __future__ import annotations

import ast

__all__ = ["parse_expression", "parse_module"]

_RACE = "AST constructor recursion depth mismatch"
_TRIES = 5


def parse_module(source: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse(source)``, tried again when another parse interrupted it.

    Raises:
        SyntaxError, ValueError, RecursionError, MemoryError: as ``ast.parse`` does.
    """
    tree = _parse(source, filename, "exec")
    assert isinstance(tree, ast.Module)
    return tree


def parse_expression(source: str) -> ast.Expression:
    """``ast.parse(source, mode="eval")``, tried again when another parse interrupted it.

    Raises:
        SyntaxError, ValueError, RecursionError, MemoryError: as ``ast.parse`` does.
    """
    tree = _parse(source, "<unknown>", "eval")
    assert isinstance(tree, ast.Expression)
    return tree


def _parse(source: str, filename: str, mode: str) -> ast.AST:
    for attempt in range(1, _TRIES + 1):
        try:
            return ast.parse(source, filename=filename, mode=mode)
        except SystemError as error:
            if _RACE not in str(error) or attempt == _TRIES:
                raise
    raise AssertionError("unreachable")
