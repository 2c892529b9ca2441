"""A JSON value written the way a grammar compiled with given options writes it.

One serialiser for the whole app: the Doctor writes its schema-drawn witnesses with it, and the
schema unit tests write each JSON document with it (after :func:`in_schema_order`) so that a
document written by hand is judged in the form the grammar would produce.
"""

from __future__ import annotations

import json
from typing import Any

from app.doctor.keywords import resolve_ref
from app.engine.grammars.spec import CompileOptions

__all__ = ["as_grammar_writes", "in_schema_order", "normalize", "separators_of"]

#: Subschemas visited to order one document, at most.
_BUDGET = 20_000


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


class _Orderer:
    """Puts a document's keys in its schema's order, within a budget of subschemas visited
    (``anyOf`` branches that ``$ref`` one another could otherwise multiply without end)."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self.budget = _BUDGET

    def flatten(self, node: Any, value: Any, refs: frozenset[str]) -> dict[str, Any]:
        """``$ref`` and ``allOf`` folded in, and the ``anyOf``/``oneOf`` branch that fits
        ``value`` best (for an object: the one declaring most of its keys; the first on a tie).
        A ``$ref`` already being followed is not followed again."""
        self.budget -= 1
        if not isinstance(node, dict) or self.budget < 0:
            return {}
        flat = dict(node)
        ref = flat.pop("$ref", None)
        if isinstance(ref, str) and ref not in refs:
            target = resolve_ref(self.root, ref)
            if target is not None:
                flat = {**self.flatten(target[1], value, refs | {ref}), **flat}
        for branch in flat.pop("allOf", None) or []:
            merged = self.flatten(branch, value, refs)
            properties = {**(merged.get("properties") or {}), **(flat.get("properties") or {})}
            flat = {**merged, **flat, "properties": properties}
        for key in ("anyOf", "oneOf"):
            branches = [self.flatten(b, value, refs) for b in flat.pop(key, None) or []]
            if branches:
                keys = set(value) if isinstance(value, dict) else set()
                best = max(branches, key=lambda b: len(keys & set(b.get("properties") or {})))
                flat = {**best, **flat}
        return flat

    def ordered(self, node: Any, value: Any) -> Any:
        """``value`` (valid under ``node`` or not) with its objects' keys in schema order."""
        if not isinstance(value, dict | list):
            return value
        flat = self.flatten(node, value, frozenset())
        if isinstance(value, list):
            prefix = flat.get("prefixItems") or []
            items = flat.get("items")
            return [
                self.ordered(prefix[i] if i < len(prefix) else items, item)
                for i, item in enumerate(value)
            ]
        found = flat.get("properties")
        properties: dict[str, Any] = found if isinstance(found, dict) else {}
        additional = flat.get("additionalProperties")
        declared = [name for name in properties if name in value]
        rest = [name for name in value if name not in properties]
        return {
            **{name: self.ordered(properties[name], value[name]) for name in declared},
            **{name: self.ordered(additional, value[name]) for name in rest},
        }


def in_schema_order(value: Any, schema: Any) -> Any:
    """``value`` with each object's keys in the order xgrammar writes them: the properties the
    schema declares, in declaration order, then the others as they came.

    Local ``$ref``s and ``allOf`` are followed; under ``anyOf``/``oneOf`` the branch declaring
    most of an object's keys gives the order.
    """
    return _Orderer(schema).ordered(schema, value)


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
