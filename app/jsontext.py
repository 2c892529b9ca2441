"""JSON text parsed whatever its integers: one reader for every text a user sends.

CPython converts a string of more than 4,300 digits to an integer only past a limit
(``sys.set_int_max_str_digits``: the conversion is quadratic), and ``json.loads`` raises a plain
``ValueError`` on such an integer, not a ``JSONDecodeError``: a 5 KB source took a compile worker
down. :func:`loads` parses like ``json.loads`` and either refuses a longer integer with a
:class:`IntegerTooLong` (a ``JSONDecodeError`` naming the number's JSON pointer, line and column)
or, for a document being judged (``long_integers=True``), reads it exactly, in time that grows
a little faster than its length (:class:`LongInt`). It imports only :mod:`app.paths`.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

from app.paths import pointer_from_parts

__all__ = ["IntegerTooLong", "LongInt", "json_type", "loads"]

# A JSON string (skipped whole), or a number: its integer digits, then a fraction or exponent.
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|-?(\d+)(\.\d+)?([eE][+-]?\d+)?')
# Digits converted by int() at once, longer runs split: under any limit Python allows (640).
_CHUNK = sys.int_info.str_digits_check_threshold
_SHOWN = 8


def _limit() -> int:
    """The most digits ``int()`` converts now (0: no limit)."""
    return sys.get_int_max_str_digits()


class IntegerTooLong(json.JSONDecodeError):
    """An integer with more digits than are read, at ``pointer`` (and ``pos``, ``lineno``,
    ``colno`` as any ``JSONDecodeError``): existing ``except json.JSONDecodeError`` handlers
    answer it with its line and column."""

    def __init__(self, doc: str, pos: int, *, pointer: str, digits: int, limit: int) -> None:
        where = pointer or "the root"
        super().__init__(
            f"the integer at {where} has {digits} digits; at most {limit} are read", doc, pos
        )
        self.pointer = pointer
        self.digits = digits

    def where(self) -> dict[str, Any]:
        """``line``, ``column`` and ``pointer``: the keywords an app error takes."""
        return {"line": self.lineno, "column": self.colno, "pointer": self.pointer}


class LongInt(int):
    """An integer of more digits than ``str()`` converts: its exact value, and a short
    ``repr`` (a validator's message quotes the value; ``int.__repr__`` would raise)."""

    digits: int
    shown: str

    def __repr__(self) -> str:
        return f"{self.shown} ({self.digits} digits)"

    __str__ = __repr__


class _Refused:
    """Stands for an integer too long to read until its place in the document is known."""

    def __init__(self, ordinal: int, digits: int) -> None:
        self.ordinal = ordinal
        self.digits = digits


def _exact(digits: str, powers: dict[int, int]) -> int:
    """``int(digits)`` for any length: halves multiplied together (sub-quadratic)."""
    if len(digits) <= _CHUNK:
        return int(digits)
    low = len(digits) // 2
    if low not in powers:
        powers[low] = 10**low
    return _exact(digits[:-low], powers) * powers[low] + _exact(digits[-low:], powers)


def _long_int(text: str) -> LongInt:
    negative = text.startswith("-")
    digits = text[1:] if negative else text
    value = LongInt(-_exact(digits, {}) if negative else _exact(digits, {}))
    value.digits = len(digits)
    value.shown = f"{text[: _SHOWN + negative]}…{digits[-_SHOWN:]}"
    return value


def _reader(refused: list[_Refused], long_integers: bool) -> Callable[[str], Any]:
    limit = _limit()

    def parse_int(text: str) -> Any:
        digits = len(text) - text.startswith("-")
        if not limit or digits <= limit:
            return int(text)
        if long_integers:
            return _long_int(text)
        refused.append(_Refused(len(refused), digits))
        return refused[-1]

    return parse_int


def _walk(value: Any) -> Iterator[tuple[list[str | int], Any]]:
    """Every value of a parsed document with its path, in document order (no recursion: a
    document nests as deep as the parser allows)."""
    stack: list[tuple[list[str | int], Any]] = [([], value)]
    while stack:
        parts, node = stack.pop()
        yield parts, node
        if isinstance(node, dict):
            stack.extend(([*parts, key], child) for key, child in reversed(node.items()))
        elif isinstance(node, list):
            stack.extend(([*parts, i], node[i]) for i in range(len(node) - 1, -1, -1))


def _offset(text: str, ordinal: int, limit: int) -> int:
    """Where the ``ordinal``-th (0-based) integer longer than ``limit`` digits starts."""
    seen = 0
    for match in _TOKEN.finditer(text):
        if match[1] is None or match[2] or match[3] or len(match[1]) <= limit:
            continue
        if seen == ordinal:
            return match.start()
        seen += 1
    return 0


def _first_refused(text: str, value: Any) -> IntegerTooLong | None:
    for parts, node in _walk(value):
        if isinstance(node, _Refused):
            limit = _limit()
            pos = _offset(text, node.ordinal, limit)
            return IntegerTooLong(
                text, pos, pointer=pointer_from_parts(parts), digits=node.digits, limit=limit
            )
    return None


def loads(
    text: str,
    *,
    long_integers: bool = False,
    parse_constant: Callable[[str], Any] | None = None,
) -> Any:
    """``json.loads(text)``, with integers longer than Python reads refused or read.

    The usual text costs one ``json.loads``; only a text whose integer the plain parse refused
    is parsed again, with a reader for such integers.

    Args:
        text: the JSON text.
        long_integers: read an integer of any length as a :class:`LongInt` (a document to be
            judged: its verdict must not depend on Python's limit); otherwise refuse it.
        parse_constant: as ``json.loads``'s (``NaN``, ``Infinity``, ``-Infinity``).

    Raises:
        IntegerTooLong: an integer longer than the limit (unless ``long_integers``); it is a
            ``json.JSONDecodeError``, with the number's line and column and its ``pointer``.
        json.JSONDecodeError: not JSON.
        RecursionError: nested too deeply to parse.
    """
    try:
        return json.loads(text, parse_constant=parse_constant)
    except json.JSONDecodeError:
        raise
    except ValueError:
        pass  # the integer-string limit (any other error comes again from the parse below)
    refused: list[_Refused] = []
    reader = _reader(refused, long_integers)
    value = json.loads(text, parse_int=reader, parse_constant=parse_constant)
    if refused and (error := _first_refused(text, value)) is not None:
        raise error
    return value


def json_type(value: Any) -> str:
    """What a parsed JSON value is, in JSON's words (never a Python type's name): "an object",
    "an array", "a string", "an integer", "a number", "a boolean" or "null"."""
    if value is None:
        return "null"
    for kind, name in ((bool, "a boolean"), (int, "an integer"), (float, "a number"),
                       (str, "a string"), (list, "an array"), (dict, "an object")):  # fmt: skip
        if isinstance(value, kind):
            return name
    return "not a JSON value"
