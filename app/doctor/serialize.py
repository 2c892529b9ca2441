"""A JSON value written the way a grammar compiled with given options writes it.

One serialiser for the whole app: the Doctor writes its schema-drawn witnesses with it, and the
schema unit tests write each JSON document with it (after :func:`in_schema_order`) so that a
document written by hand is judged in the form the grammar would produce.
"""

from __future__ import annotations

import json
from typing import Any

from app.doctor.keywords import resolve_ref
from app.engine.grammar import CompileOptions

__all__ = ["as_grammar_writes", "in_schema_order", "normalize", "separators_of"]

_MAX_DEPTH = 64


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


def _flatten(root: Any, node: Any, value: Any, depth: int) -> dict[str, Any]:
    """``$ref`` and ``allOf`` folded in, and the ``anyOf``/``oneOf`` branch that fits ``value``
    best (for an object: the one declaring most of its keys; the first on a tie)."""
    if not isinstance(node, dict) or depth > _MAX_DEPTH:
        return {}
    flat = dict(node)
    if "$ref" in flat:
        target = resolve_ref(root, flat.pop("$ref"))
        if target is not None:
            flat = {**_flatten(root, target[1], value, depth + 1), **flat}
    for branch in flat.pop("allOf", None) or []:
        merged = _flatten(root, branch, value, depth + 1)
        properties = {**(merged.get("properties") or {}), **(flat.get("properties") or {})}
        flat = {**merged, **flat, "properties": properties}
    for key in ("anyOf", "oneOf"):
        branches = [_flatten(root, b, value, depth + 1) for b in flat.pop(key, None) or []]
        if branches:
            keys = set(value) if isinstance(value, dict) else set()
            best = max(branches, key=lambda b: len(keys & set(b.get("properties") or {})))
            flat = {**best, **flat}
    return flat


def _ordered(root: Any, node: Any, value: Any, depth: int) -> Any:
    if not isinstance(value, dict | list) or depth > _MAX_DEPTH:
        return value
    flat = _flatten(root, node, value, depth)
    if isinstance(value, list):
        prefix = flat.get("prefixItems") or []
        items = flat.get("items")
        return [
            _ordered(root, prefix[i] if i < len(prefix) else items, item, depth + 1)
            for i, item in enumerate(value)
        ]
    found = flat.get("properties")
    properties: dict[str, Any] = found if isinstance(found, dict) else {}
    additional = flat.get("additionalProperties")
    declared = [name for name in properties if name in value]
    rest = [name for name in value if name not in properties]
    return {
        **{name: _ordered(root, properties[name], value[name], depth + 1) for name in declared},
        **{name: _ordered(root, additional, value[name], depth + 1) for name in rest},
    }


def in_schema_order(value: Any, schema: Any) -> Any:
    """``value`` with each object's keys in the order xgrammar writes them: the properties the
    schema declares, in declaration order, then the others as they came.

    Local ``$ref``s and ``allOf`` are followed; under ``anyOf``/``oneOf`` the branch declaring
    most of an object's keys gives the order.
    """
    return _ordered(schema, schema, value, 0)


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def normalize(text: str, schema: Any, options: CompileOptions) -> str | None:
    """``text`` re-serialised as the grammar writes it (keys in the schema's order, the
    grammar's separators and indent), or None when it is not JSON (``NaN`` and the like are
    not)."""
    try:
        value = json.loads(text, parse_constant=_no_constants)
    except ValueError:
        return None
    return as_grammar_writes(in_schema_order(value, schema), options)
