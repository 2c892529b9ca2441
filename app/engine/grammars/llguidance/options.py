"""xgrammar's effective compile options as llguidance's JSON options, and what does not carry.

The options a grammar request names are xgrammar's. llguidance 1.7.6 has equivalents for some:
separators (regexes in llguidance, so written escaped), ``any_whitespace`` as
``whitespace_flexible``, and ``strict_mode`` by writing ``additionalProperties: false`` (and
``items: false`` after ``prefixItems``) where the schema leaves them open, which is what
xgrammar's strict mode assumes. ``indent`` and ``max_whitespace_cnt`` have none:
``tests/engine/grammars/test_llguidance_options.py`` pins each rule on both libraries.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from app.engine.grammars.spec import CompileOptions

__all__ = [
    "NOT_CARRIED_WHY",
    "JsonOptions",
    "effective_separators",
    "json_options",
    "regex_literal",
    "strict_schema",
]

#: Why each option that llguidance cannot reproduce is listed in ``not_carried``.
NOT_CARRIED_WHY = {
    "indent": "llguidance has no indentation option: it writes the JSON on one line",
    # Measured on 1.7.6: whitespace_pattern "[ ]{0,2}" still accepts three spaces.
    "max_whitespace_cnt": "llguidance 1.7.6 repeats its whitespace pattern, so a bound written "
    "in it is not enforced",
}

# Characters Rust's regex syntax (llguidance's separators are regexes) needs escaped.
_REGEX_META = frozenset("\\.+*?()|[]{}^$#&-~")

# Where subschemas live, after vLLM's walk (backend_guidance.py, 0.32.0).
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SUBSCHEMAS = (
    "additionalProperties", "unevaluatedProperties", "propertyNames", "contains",
    "additionalItems", "unevaluatedItems", "not", "if", "then", "else", "items", "prefixItems",
    "allOf", "anyOf", "oneOf",
)  # fmt: skip
# Keywords that say nothing about an object's content: xgrammar reads ``{"type": "object"}``
# with only these as "any object", even in strict mode (measured on 0.2.9).
_ANNOTATIONS = frozenset({"type", "title", "description", "$schema", "$id", "default", "examples"})


def regex_literal(text: str) -> str:
    """``text`` as a Rust regex that matches exactly it."""
    return "".join("\\" + ch if ch in _REGEX_META else ch for ch in text)


def effective_separators(options: CompileOptions) -> tuple[str, str]:
    """The separators xgrammar uses: given ones, else ``(",", ":")`` with ``any_whitespace``
    (whitespace goes around them), ``(", ", ": ")`` without, ``(",", ": ")`` with an indent."""
    if options.separators is not None:
        return options.separators
    if options.any_whitespace:
        return (",", ":")
    return (", ", ": ") if options.indent is None else (",", ": ")


def _closes(node: dict[str, Any]) -> bool:
    """Whether xgrammar's strict mode closes this object schema to unnamed properties."""
    if "additionalProperties" in node or "unevaluatedProperties" in node:
        return False
    if "properties" in node or "required" in node:
        return True
    return node.get("type") == "object" and not set(node) <= _ANNOTATIONS


def _close_in_place(node: Any) -> None:
    if isinstance(node, list):
        for item in node:
            _close_in_place(item)
        return
    if not isinstance(node, dict):
        return
    for key in _SCHEMA_MAPS:
        if isinstance(node.get(key), dict):
            for sub in node[key].values():
                _close_in_place(sub)
    for key in _SUBSCHEMAS:
        _close_in_place(node.get(key))
    if _closes(node):
        node["additionalProperties"] = False
    if "prefixItems" in node and not {"items", "additionalItems", "unevaluatedItems"} & set(node):
        node["items"] = False


def strict_schema(schema: Any) -> Any:
    """A copy of ``schema`` closed as xgrammar's ``strict_mode`` reads it: no property the
    schema does not name, no item after ``prefixItems``, unless the schema allows them."""
    closed = copy.deepcopy(schema)
    _close_in_place(closed)
    return closed


@dataclass(frozen=True)
class JsonOptions:
    """A JSON Schema with options, as llguidance compiles it.

    Attributes:
        schema: the schema to compile (``strict_mode`` written into it).
        options: llguidance's ``JsonCompileOptions``.
        not_carried: names of the options llguidance has no equivalent for (see
            :data:`NOT_CARRIED_WHY`).
    """

    schema: Any
    options: dict[str, Any]
    not_carried: tuple[str, ...]


def json_options(schema: Any, options: CompileOptions) -> JsonOptions:
    """What llguidance compiles for ``schema`` under xgrammar's ``options``."""
    item, key = effective_separators(options)
    carried = {
        "whitespace_flexible": options.any_whitespace,
        "item_separator": regex_literal(item),
        "key_separator": regex_literal(key),
    }
    not_carried = []
    # xgrammar itself ignores indent under any_whitespace: then there is nothing to carry.
    if options.indent is not None and not options.any_whitespace:
        not_carried.append("indent")
    # Without any_whitespace xgrammar allows no free whitespace to bound.
    if options.max_whitespace_cnt is not None and options.any_whitespace:
        not_carried.append("max_whitespace_cnt")
    closed = strict_schema(schema) if options.strict_mode else schema
    return JsonOptions(closed, carried, tuple(not_carried))
