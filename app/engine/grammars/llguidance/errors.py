"""llguidance's error messages, located in the source where the message says enough."""

from __future__ import annotations

import json
import re
from typing import Any

from app.engine.grammars.compile_worker import located_error, subschemas
from app.engine.grammars.spec import GrammarKind
from app.engine.jsonpointer import line_column
from app.exceptions import GrammarError
from app.paths import pointer_from_parts, split_pointer

__all__ = ["grammar_error", "lark_error", "schema_pointers"]

_UNIMPLEMENTED = re.compile(r"Unimplemented keys: \[(.*?)\]")
_UNKNOWN_FORMAT = re.compile(r"Unknown format: (\S+)")
_MISSING_POINTER = re.compile(r"Pointer '([^']*)' does not exist")
# "regex parse error:\n    (?=a)\n    ^^^\nerror: ..." as the regex crate prints it
_REGEX_CARET = re.compile(r"regex parse error:\n {4}(.*)\n( *)\^")
# "at 1(8): unknown name" / "1(13): Expected token": line(column) in the Lark text
_LARK_POSITION = re.compile(r"^(?:at )?(\d+)\((\d+)\)")


def schema_pointers(schema: Any, message: str) -> list[str]:
    """JSON pointers of what an llguidance message about ``schema`` names: the keywords it does
    not implement, an unknown ``format``, a ``$ref`` that points nowhere, a ``pattern`` its
    regex engine refuses. Empty when the message names nothing findable."""
    keys = set(json.loads(f"[{m[1]}]")) if (m := _UNIMPLEMENTED.search(message)) else set()
    fmt = f[1] if (f := _UNKNOWN_FORMAT.search(message)) else None
    ref = f"#{r[1]}" if (r := _MISSING_POINTER.search(message)) else None
    pattern = p[1] if (p := _REGEX_CARET.search(message)) else None
    return [
        pointer_from_parts([*parts, key])
        for parts, node in subschemas(schema, [])
        for key, value in node.items()
        if key in keys
        or (key == "format" and value == fmt)
        or (key == "$ref" and value == ref)
        or (key == "pattern" and value == pattern)
    ]


def grammar_error(kind: GrammarKind, source: str, schema: Any, message: str) -> GrammarError:
    """A :class:`GrammarError` for llguidance's ``message`` about ``source``, located where the
    message says: a JSON pointer (and its line) for schemas, line and column for a regex and for
    a grammar llguidance read as written (Lark)."""
    message = f"llguidance: {message.strip()}"
    if kind is GrammarKind.JSON_SCHEMA:
        pointers = schema_pointers(schema, message)
        if pointers:
            return located_error(source, list(split_pointer(pointers[0])), message)
    elif kind is GrammarKind.REGEX and (caret := _REGEX_CARET.search(message)):
        offset = source.find(caret[1])
        if offset >= 0:
            line, column = line_column(source, offset + len(caret[2]) - 4)
            return GrammarError(message, line=line, column=column)
    return GrammarError(message)


def lark_error(source_is_lark: bool, message: str) -> GrammarError:
    """An error in a Lark grammar: its line and column when the Lark text is the user's own
    (a converted GBNF grammar's lines are not the source's)."""
    if source_is_lark and (position := _LARK_POSITION.match(message.strip())):
        return GrammarError(
            f"llguidance: {message.strip()}", line=int(position[1]), column=int(position[2])
        )
    prefix = "llguidance" if source_is_lark else "llguidance, in its Lark translation of the EBNF"
    return GrammarError(f"{prefix}: {message.strip()}")
