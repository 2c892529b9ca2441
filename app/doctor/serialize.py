"""A JSON value written the way a grammar compiled with given options writes it."""

from __future__ import annotations

import json
from typing import Any

from app.engine.grammar import CompileOptions

__all__ = ["as_grammar_writes", "separators_of"]


def separators_of(options: CompileOptions) -> tuple[str, str]:
    """The item and key separators xgrammar uses for these options (its documented defaults:
    ``(",", ":")`` with any whitespace, ``(",", ": ")`` with an indent, else ``(", ", ": ")``)."""
    if options.separators is not None:
        return options.separators
    if options.any_whitespace:
        return (",", ":")
    return (",", ": ") if options.indent is not None else (", ", ": ")


def as_grammar_writes(value: Any, options: CompileOptions) -> str:
    """``value`` in the grammar's separators and indent; object keys keep their order (the
    drawer writes them in the schema's order, which is the grammar's)."""
    indent = None if options.any_whitespace else options.indent
    return json.dumps(value, indent=indent, separators=separators_of(options), ensure_ascii=False)
