"""Before a Pydantic source is parsed: its size, lines, NUL characters, bracket nesting and
look-alike names, without building a tree (parsing itself runs in the server)."""

from __future__ import annotations

import ast
import io
import tokenize
import unicodedata
from dataclasses import dataclass

from app.exceptions import SourceRefused

__all__ = [
    "MAX_BRACKETS",
    "MAX_LINES",
    "MAX_SOURCE_BYTES",
    "Where",
    "refuse",
    "scan",
    "scan_expression",
]

MAX_SOURCE_BYTES = 64 * 1024
MAX_LINES = 3000
MAX_BRACKETS = 40


@dataclass(frozen=True)
class Where:
    """A 1-based line and column, for what has no ``ast`` node."""

    line: int
    column: int


def refuse(node: ast.AST | Where, what: str) -> SourceRefused:
    """The refusal of ``what``, found at ``node``, with its line and column."""
    line = getattr(node, "lineno", None) if isinstance(node, ast.AST) else node.line
    column = getattr(node, "col_offset", None) if isinstance(node, ast.AST) else node.column - 1
    where = f"line {line}, column {(column or 0) + 1}: " if line else ""
    return SourceRefused(f"{where}{what}", line=line, column=None if column is None else column + 1)


def _problem(source: str) -> tuple[Where, str] | None:
    """The first bracket nested too deep or look-alike name, by its place in ``source``.

    Raises:
        tokenize.TokenError, SyntaxError: ``source`` does not tokenize.
    """
    depth = 0
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.OP and token.string in "([{":
            depth += 1
            if depth > MAX_BRACKETS:
                return Where(token.start[0], token.start[1] + 1), (
                    f"brackets nested deeper than {MAX_BRACKETS}"
                )
        elif token.type == tokenize.OP and token.string in ")]}":
            depth -= 1
        elif token.type == tokenize.NAME:
            normal = unicodedata.normalize("NFKC", token.string)
            if normal != token.string:
                where = Where(token.start[0], token.start[1] + 1)
                return where, f"the name {token.string!r} uses look-alike characters ({normal!r})"
    return None


def _scan_tokens(source: str) -> None:
    try:
        problem = _problem(source)
    except (tokenize.TokenError, SyntaxError) as error:
        line = error.args[1][0] if len(error.args) > 1 and error.args[1] else None
        raise SourceRefused(f"syntax error: {error.args[0]}", line=line) from None
    if problem is not None:
        raise refuse(*problem)


def scan_expression(text: str, node: ast.AST, shown: str) -> None:
    """Refuse the text of a string annotation (``shown`` in the message, at ``node``) whose
    brackets nest too deep or whose names use look-alike characters, before it is parsed: the
    scan of the source does not look inside strings.

    Raises:
        SourceRefused: at ``node``, saying what is wrong inside the string.
    """
    try:
        problem = _problem(text)
    except (tokenize.TokenError, SyntaxError, ValueError):
        raise refuse(node, f"{shown} is not an expression") from None
    if problem is not None:
        raise refuse(node, f"{shown}: {problem[1]}")


def scan(source: str) -> None:
    """Refuse a source too big, too long or too nested to parse, or with look-alike names.

    Raises:
        SourceRefused: with the line and column where there is one.
    """
    size = len(source.encode("utf-8", errors="surrogatepass"))
    if size > MAX_SOURCE_BYTES:
        raise SourceRefused(
            f"the source is {size} bytes; a Pydantic source may be {MAX_SOURCE_BYTES}"
        )
    if source.count("\n") + 1 > MAX_LINES:
        raise SourceRefused(f"the source has more than {MAX_LINES} lines")
    if "\0" in source:
        raise SourceRefused("the source contains a NUL character")
    _scan_tokens(source)
