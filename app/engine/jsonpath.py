"""Where a JSON document being generated is: its nesting depth and the path of the value.

xgrammar >= 0.1.21 parses with an Earley parser and exposes no stack, so the depth a pushdown
automaton would hold is recovered from the accepted text itself: the objects and arrays open in
it. The tracker is incremental (fed one token's bytes at a time) and immutable, so a session keeps
one position per step and going back is a list truncation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from app.paths import format_path

__all__ = ["JsonPosition", "advance", "format_path"]

_QUOTE, _BACKSLASH = 0x22, 0x5C
_OPEN_OBJECT, _CLOSE_OBJECT, _OPEN_ARRAY, _CLOSE_ARRAY, _COMMA = 0x7B, 0x7D, 0x5B, 0x5D, 0x2C

# A frame is ("{", key or None, awaiting_key) for an object, ("[", index, False) for an array.
Frame = tuple[str, "str | int | None", bool]


@dataclass(frozen=True, slots=True)
class JsonPosition:
    """The structural state after some JSON text: open containers and the lexer's string state."""

    frames: tuple[Frame, ...] = ()
    in_string: bool = False
    in_key: bool = False
    escaped: bool = False
    key: bytes = b""

    @property
    def depth(self) -> int:
        """Objects and arrays open in the text so far."""
        return len(self.frames)

    @property
    def path(self) -> str:
        """The JSONPath of the value being generated; an object's path while a key is written."""
        return format_path(sel for _, sel, _ in self.frames if sel is not None)


def _decode_key(raw: bytes) -> str:
    try:
        value = json.loads(b'"' + raw + b'"')
    except ValueError:
        return raw.decode("utf-8", errors="replace")
    return value if isinstance(value, str) else str(value)


def advance(position: JsonPosition, data: bytes) -> JsonPosition:
    """Return the position after ``data`` (one token's bytes) follows ``position``.

    The scan is tolerant: text that is not JSON never raises, it only leaves a less useful path.
    Multi-byte UTF-8 characters need no care since every structural character is ASCII.
    """
    frames = list(position.frames)
    in_string, in_key, escaped = position.in_string, position.in_key, position.escaped
    key = bytearray(position.key)
    for byte in data:
        if in_string:
            if escaped:
                escaped = False
            elif byte == _BACKSLASH:
                escaped = True
            elif byte == _QUOTE:
                in_string = False
                if in_key:
                    frames[-1] = ("{", _decode_key(bytes(key)), False)
                    in_key = False
                    key.clear()
                continue
            if in_key:
                key.append(byte)
        elif byte == _QUOTE:
            in_string, escaped = True, False
            in_key = bool(frames) and frames[-1][0] == "{" and frames[-1][2]
        elif byte == _OPEN_OBJECT:
            frames.append(("{", None, True))
        elif byte == _OPEN_ARRAY:
            frames.append(("[", 0, False))
        elif byte in (_CLOSE_OBJECT, _CLOSE_ARRAY):
            if frames:
                frames.pop()
        elif byte == _COMMA and frames:
            kind, selector, _ = frames[-1]
            if kind == "{":
                frames[-1] = ("{", None, True)
            elif isinstance(selector, int):
                frames[-1] = ("[", selector + 1, False)
    return JsonPosition(tuple(frames), in_string, in_key, escaped, bytes(key))
