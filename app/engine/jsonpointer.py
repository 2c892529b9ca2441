"""Where a JSON pointer (RFC 6901) points in the source text: line and column.

Pointers themselves are built, split and escaped in :mod:`app.paths`; the two names re-exported
here keep this module's old imports working.
"""

from __future__ import annotations

import json

from app.paths import pointer_from_parts, split_pointer

__all__ = ["line_column", "locate", "pointer_from_parts", "split_pointer"]

_DECODER = json.JSONDecoder()
_WHITESPACE = " \t\n\r"


def line_column(source: str, offset: int) -> tuple[int, int]:
    """1-based line and column of a character offset in ``source``."""
    line = source.count("\n", 0, offset) + 1
    column = offset - (source.rfind("\n", 0, offset) + 1) + 1
    return line, column


def _skip_ws(source: str, pos: int) -> int:
    while pos < len(source) and source[pos] in _WHITESPACE:
        pos += 1
    return pos


def _child_start(source: str, pos: int, token: str) -> int | None:
    """Offset of the member ``token`` of the object or array starting at ``pos``."""
    opener = source[pos] if pos < len(source) else ""
    if opener not in "{[":
        return None
    index = 0
    pos = _skip_ws(source, pos + 1)
    while pos < len(source) and source[pos] not in "}]":
        if opener == "{":
            key, pos = _DECODER.raw_decode(source, pos)
            pos = _skip_ws(source, _skip_ws(source, pos) + 1)
            if key == token:
                return pos
        elif token == str(index):
            return pos
        _, pos = _DECODER.raw_decode(source, pos)
        pos = _skip_ws(source, pos)
        if pos < len(source) and source[pos] == ",":
            pos = _skip_ws(source, pos + 1)
        index += 1
    return None


def locate(source: str, pointer: str) -> tuple[int, int] | None:
    """Line and column where the value at ``pointer`` starts in the JSON text ``source``.

    Returns:
        1-based (line, column), or None when the pointer does not resolve or the text is not JSON.
    """
    try:
        pos: int | None = _skip_ws(source, 0)
        for token in split_pointer(pointer):
            assert pos is not None
            pos = _child_start(source, pos, token)
            if pos is None:
                return None
    except (ValueError, IndexError):
        return None
    assert pos is not None
    return line_column(source, pos)
