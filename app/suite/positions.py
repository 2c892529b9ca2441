"""Where a JSON pointer is in a source file: line and column (1-based, in code points).

For JSON text, one pass of a JSON tokenizer (the standard library's scanner) maps every pointer
to where it is written: an object member at its key (the keyword's name), an array item at its
first character. For a Pydantic source, a pointer's line is its field's (the Doctor's
:func:`app.doctor.source_lines.pydantic_lines`) and the column that line's first character.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable
from json.decoder import scanstring  # type: ignore[attr-defined]

from app.paths import escape_token

__all__ = ["Locator", "json_positions", "locator_for", "parent_pointers"]

#: A pointer's (line, column), or None when the source does not hold it.
Locator = Callable[[str], tuple[int, int] | None]

_DECODER = json.JSONDecoder()
_WHITESPACE = " \t\n\r"


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _WHITESPACE:
        pos += 1
    return pos


def _expect(text: str, pos: int, char: str) -> int:
    if pos >= len(text) or text[pos] != char:
        raise ValueError(f"expected {char!r} at offset {pos}")
    return pos + 1


def _members(text: str, pos: int, pointer: str, out: dict[str, int], depth: int) -> int:
    """The object at ``pos`` (just after its ``{``); returns the offset after its ``}``."""
    pos = _skip(text, pos)
    if text[pos : pos + 1] == "}":
        return pos + 1
    while True:
        at = pos
        key, pos = scanstring(text, _expect(text, pos, '"'))
        child = f"{pointer}/{escape_token(key)}"
        out.setdefault(child, at)
        pos = _skip(text, _expect(text, _skip(text, pos), ":"))
        pos = _skip(text, _value(text, pos, child, out, depth + 1))
        if text[pos : pos + 1] == "}":
            return pos + 1
        pos = _skip(text, _expect(text, pos, ","))


def _items(text: str, pos: int, pointer: str, out: dict[str, int], depth: int) -> int:
    """The array at ``pos`` (just after its ``[``); returns the offset after its ``]``."""
    pos = _skip(text, pos)
    if text[pos : pos + 1] == "]":
        return pos + 1
    index = 0
    while True:
        child = f"{pointer}/{index}"
        out.setdefault(child, pos)
        pos = _skip(text, _value(text, pos, child, out, depth + 1))
        if text[pos : pos + 1] == "]":
            return pos + 1
        pos = _skip(text, _expect(text, pos, ","))
        index += 1


def _value(text: str, pos: int, pointer: str, out: dict[str, int], depth: int) -> int:
    if depth > 500:
        raise ValueError("nested too deep")
    opener = text[pos : pos + 1]
    if opener == "{":
        return _members(text, pos + 1, pointer, out, depth)
    if opener == "[":
        return _items(text, pos + 1, pointer, out, depth)
    _, end = _DECODER.raw_decode(text, pos)
    return int(end)


def json_positions(text: str) -> dict[str, tuple[int, int]]:
    """Every pointer of the JSON ``text`` and its (line, column); ``{}`` when it is not JSON
    (what parsed before the error is kept)."""
    offsets: dict[str, int] = {}
    start = _skip(text, 0)
    offsets[""] = start
    try:
        _value(text, start, "", offsets, 0)
    except (ValueError, IndexError):
        pass
    starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]

    def position(offset: int) -> tuple[int, int]:
        line = bisect.bisect_right(starts, offset)
        return line, offset - starts[line - 1] + 1

    return {pointer: position(offset) for pointer, offset in offsets.items()}


def parent_pointers(pointer: str) -> list[str]:
    """``pointer`` and each of its parents, nearest first, ending with the root ``""``."""
    out = [pointer]
    while pointer:
        pointer = pointer.rsplit("/", 1)[0]
        out.append(pointer)
    return out


def _pydantic_locator(text: str, root: str) -> Locator:
    from app.doctor.source_lines import pydantic_lines

    line_of = pydantic_lines(text, root)
    lines = text.splitlines()

    def locate(pointer: str) -> tuple[int, int] | None:
        line = line_of(pointer)
        if line is None or line > len(lines):
            return None
        written = lines[line - 1]
        return line, len(written) - len(written.lstrip()) + 1

    return locate


def locator_for(kind: str, text: str, *, pydantic_root: str | None = None) -> Locator:
    """The locator of a source: pointers into the JSON it is, or into the Pydantic model
    ``pydantic_root`` of a Python source."""
    if kind == "pydantic":
        if pydantic_root is None:
            return lambda _: None
        return _pydantic_locator(text, pydantic_root)
    if kind not in ("json_schema", "tools", "structural_tag", "request"):
        return lambda _: None
    positions = json_positions(text)
    return lambda pointer: next(
        (positions[p] for p in parent_pointers(pointer) if p in positions), None
    )
