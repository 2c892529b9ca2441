"""Random documents a JSON Schema accepts, drawn from the schema alone (seeded).

The draw follows the common keywords (types, properties and required, items and prefixItems,
bounds, enum and const, anyOf/oneOf branches, allOf merged, local ``$ref``, formats, patterns);
what it does not model (``not``, ``if``, ``uniqueItems`` across branches...) can make a draw
invalid, so every draw is validated afterwards and the invalid ones dropped. Objects keep the
schema's property order, which is the order xgrammar writes them in.
"""

from __future__ import annotations

import math
import random
import string
from typing import Any

from app.doctor.keywords import resolve_ref
from app.doctor.regex_sample import Unsupported, sample_regex

__all__ = [
    "MAX_CHARS",
    "MAX_ITEMS",
    "MAX_VALUES",
    "GiveUp",
    "InstanceDrawer",
    "TooLarge",
    "Undeclared",
    "without_undeclared",
]

#: The size caps of a drawn document, checked before anything is allocated: characters in one
#: string, items of one array (or properties of one object), strings' characters and values in
#: the whole document. ``"minLength": 1000000000`` is reported, never built.
MAX_CHARS = 10_000
MAX_ITEMS = 1_000
MAX_VALUES = 100_000

_FORMATS = {
    "date-time": "2024-05-17T09:30:00Z",
    "date": "2024-05-17",
    "time": "09:30:00Z",
    "duration": "P3DT4H",
    "email": "ada@example.com",
    "idn-email": "ada@example.com",
    "hostname": "example.com",
    "idn-hostname": "example.com",
    "ipv4": "192.168.0.1",
    "ipv6": "2001:db8::1",
    "uuid": "3f2c1a9e-8b7d-4c6e-9f1a-2b3c4d5e6f70",
    "uri": "https://example.com/a",
    "iri": "https://example.com/a",
    "uri-reference": "/a/b",
    "iri-reference": "/a/b",
    "uri-template": "https://example.com/{id}",
    "json-pointer": "/a/0",
    "relative-json-pointer": "0/a",
    "regex": "^a+$",
}
_TEXT = string.ascii_letters + string.digits + " "
#: Characters JSON must escape, or that are not ASCII: drawn now and then, since a grammar can
#: get them wrong where plain letters pass.
_RARE = '"\\\n\té€'
_RARE_SHARE = 0.1
_MAX_DEPTH = 12
_SHALLOW = 5


class GiveUp(Exception):
    """This draw cannot satisfy the schema (a false subschema, too deep, a pattern not drawn)."""


class TooLarge(GiveUp):
    """The document this draw asks for is above a size cap; the message names the keyword."""


class Undeclared(dict[str, Any]):
    """An object holding properties its schema does not declare (``strict_mode`` refuses them).

    Attributes:
        undeclared: the names of those properties.
    """

    def __init__(self) -> None:
        super().__init__()
        self.undeclared: set[str] = set()


def without_undeclared(value: Any) -> Any:
    """The document with every undeclared property removed."""
    if isinstance(value, dict):
        hidden = value.undeclared if isinstance(value, Undeclared) else set()
        return {k: without_undeclared(v) for k, v in value.items() if k not in hidden}
    if isinstance(value, list):
        return [without_undeclared(v) for v in value]
    return value


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if key == "properties" and isinstance(out.get(key), dict) and isinstance(value, dict):
            out[key] = {**out[key], **value}
        elif key == "required" and isinstance(out.get(key), list) and isinstance(value, list):
            out[key] = out[key] + [v for v in value if v not in out[key]]
        else:
            out[key] = value
    return out


class InstanceDrawer:
    """Draws documents for one schema.

    Args:
        schema: the parsed JSON Schema.
        rng: the random generator (one per document, for reproducible draws).
        extras: add undeclared properties where the schema allows them.
    """

    def __init__(self, schema: Any, rng: random.Random, *, extras: bool = True) -> None:
        self._root = schema
        self._rng = rng
        self._extras = extras
        self._size = 0

    def _grow(self, amount: int, keyword: str, cap: int) -> None:
        """Count ``amount`` more characters or values, refusing one item above ``cap`` or a
        document above ``MAX_VALUES`` (before they are made)."""
        if amount > cap:
            raise TooLarge(f"{keyword} asks for {amount} (the Doctor builds at most {cap})")
        self._size += amount
        if self._size > MAX_VALUES:
            raise TooLarge(
                f"{keyword}: the document would hold over {MAX_VALUES} characters and values "
                "(the Doctor builds no larger one)"
            )

    def draw(self) -> Any:
        """One document; GiveUp when this draw cannot satisfy the schema."""
        return self._any(self._root, 0)

    def draw_from(self, node: Any) -> Any:
        """A value for one subschema of the schema (its ``$ref``s resolve in the whole schema);
        GiveUp when this draw cannot satisfy it."""
        return self._any(node, 0)

    def _flatten(self, node: Any, depth: int) -> dict[str, Any]:
        """``$ref``, ``allOf`` and one ``anyOf``/``oneOf`` branch folded into one schema."""
        if node is True or node == {}:
            return {"type": self._rng.choice(["string", "integer", "boolean", "null"])}
        if node is False or not isinstance(node, dict) or depth > _MAX_DEPTH:
            raise GiveUp
        flat: dict[str, Any] = dict(node)
        if "$ref" in flat:
            target = resolve_ref(self._root, flat.pop("$ref"))
            if target is None:
                raise GiveUp
            flat = _merge(self._flatten(target[1], depth + 1), flat)
        for branch in flat.pop("allOf", None) or []:
            flat = _merge(flat, self._flatten(branch, depth + 1))
        for key in ("anyOf", "oneOf"):
            if isinstance(flat.get(key), list) and flat[key]:
                branch = self._rng.choice(flat.pop(key))
                flat = _merge(flat, self._flatten(branch, depth + 1))
        return flat

    def _any(self, node: Any, depth: int) -> Any:
        flat = self._flatten(node, depth)
        if "const" in flat:
            return flat["const"]
        if isinstance(flat.get("enum"), list) and flat["enum"]:
            return self._rng.choice(flat["enum"])
        kind = flat.get("type")
        if isinstance(kind, list):
            kind = self._rng.choice(kind) if kind else None
        kind = kind or _implied_type(flat)
        draw = getattr(self, f"_{kind}", None)
        if draw is None:
            raise GiveUp
        return draw(flat, depth)

    def _object(self, node: dict[str, Any], depth: int) -> dict[str, Any]:
        out = Undeclared()
        required = set(node.get("required") or [])
        properties = node.get("properties") or {}
        optional = 0.5 if depth < _SHALLOW else 0.1
        for name, sub in properties.items():
            if name in required or self._rng.random() < optional:
                out[name] = self._any(sub, depth + 1)
        additional = node.get("additionalProperties", True)
        for name in sorted(required - set(out)):
            out[name] = self._any(additional if additional is not False else True, depth + 1)
        want, limit = int(node.get("minProperties", 0)), int(node.get("maxProperties", 1 << 30))
        self._grow(max(want, len(out)), "minProperties", MAX_ITEMS)
        open_object = additional is not False and "patternProperties" not in node
        open_object = open_object and node.get("unevaluatedProperties", True) is not False
        while open_object and len(out) < limit:
            if len(out) >= want and not (self._extras and self._rng.random() < 0.3):
                break
            name = f"extra_{len(out)}"
            out[name] = self._any(additional if isinstance(additional, dict) else True, depth + 1)
            out.undeclared.add(name)
        return out

    def _array(self, node: dict[str, Any], depth: int) -> list[Any]:
        prefix = node.get("prefixItems") or []
        low = int(node.get("minItems", 0))
        high = int(node.get("maxItems", low + (3 if depth < _SHALLOW else 0)))
        self._grow(low, "minItems", MAX_ITEMS)
        count = self._rng.randint(low, max(low, min(high, low + 3)))
        items = node.get("items", True)
        out: list[Any] = []
        for index in range(count):
            sub = prefix[index] if index < len(prefix) else items
            if sub is False:
                break
            value = self._any(sub, depth + 1)
            if node.get("uniqueItems") and value in out:
                value = self._any(sub, depth + 1)
                if value in out:
                    raise GiveUp
            out.append(value)
        if "contains" in node and len(out) < high:
            out.append(self._any(node["contains"], depth + 1))
        return out

    def _string(self, node: dict[str, Any], depth: int) -> str:
        low, high = int(node.get("minLength", 0)), node.get("maxLength")
        self._grow(low, "minLength", MAX_CHARS)
        if isinstance(node.get("pattern"), str):
            try:
                text = sample_regex(node["pattern"], self._rng, max_length=high)
            except Unsupported:
                raise GiveUp from None
        elif node.get("format") in _FORMATS:
            text = _FORMATS[node["format"]]
        else:
            top = low + 12 if high is None else min(int(high), low + 12)
            text = "".join(self._char() for _ in range(self._rng.randint(low, top)))
        if len(text) < low or (high is not None and len(text) > high):
            raise GiveUp
        return text

    def _char(self) -> str:
        pool = _RARE if self._rng.random() < _RARE_SHARE else _TEXT
        return self._rng.choice(pool)

    def _integer(self, node: dict[str, Any], depth: int) -> int:
        low, high = _bounds(node, integer=True)
        step = node.get("multipleOf")
        if isinstance(step, int) and step > 0:
            first, last = -(-low // step), high // step
            if first > last:
                raise GiveUp
            return step * self._rng.randint(first, last)
        if low > high:
            raise GiveUp
        return self._rng.randint(low, high)

    def _number(self, node: dict[str, Any], depth: int) -> float | int:
        if isinstance(node.get("multipleOf"), int) or self._rng.random() < 0.5:
            return self._integer(node, depth)
        low, high = _bounds(node, integer=False)
        if low > high:
            raise GiveUp
        return round(self._rng.uniform(low, high), 2)

    def _boolean(self, node: dict[str, Any], depth: int) -> bool:
        return self._rng.random() < 0.5

    def _null(self, node: dict[str, Any], depth: int) -> None:
        return None


def _implied_type(node: dict[str, Any]) -> str:
    if {"properties", "required", "additionalProperties", "patternProperties"} & set(node):
        return "object"
    if {"items", "prefixItems", "minItems", "maxItems", "contains"} & set(node):
        return "array"
    if {"minLength", "maxLength", "pattern", "format"} & set(node):
        return "string"
    if {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"} & set(node):
        return "number"
    return "string"


def _bounds(node: dict[str, Any], *, integer: bool) -> tuple[Any, Any]:
    low = node.get("minimum", -50)
    high = node.get("maximum", max(1000, low + 1000))
    if isinstance(node.get("exclusiveMinimum"), int | float):
        low = max(low, node["exclusiveMinimum"] + (1 if integer else 0.01))
    if isinstance(node.get("exclusiveMaximum"), int | float):
        high = min(high, node["exclusiveMaximum"] - (1 if integer else 0.01))
    if integer:
        return math.ceil(low), math.floor(high)
    return low, high
