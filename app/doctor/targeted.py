"""Documents built to break one keyword alone: the targeted witnesses.

For each constraint keyword, :func:`breakers` gives values meant to break that keyword and
nothing else, built from the keyword's value and the value the document already has where the
keyword applies (``uniqueItems``: a repeated item; ``not``: the negated value; ``maxItems``: one
item too many; ``multipleOf``: a non-multiple...). Whether a value really breaks the keyword is
the validator's call, never this module's: the values are proposals, judged afterwards.

A keyword for which no breaking value can exist (``minItems: 0``, ``uniqueItems: false``) or
none can be built (a ``minLength`` too long to write) gets the reason instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["MISSING", "TYPE_SAMPLES", "Breakers", "breakers"]


class _Missing:
    """No value where the keyword applies (an optional property left out)."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()

#: One value of each JSON type: the ones tried against ``type`` and for schemas without it.
TYPE_SAMPLES: dict[str, Any] = {
    "object": {},
    "array": [],
    "string": "a",
    "integer": 1,
    "number": 1.5,
    "boolean": True,
    "null": None,
}
#: The longest string or array built on purpose (a longer bound gets a reason instead).
_LONGEST = 4096
_ODD_STRINGS = ("", "a", "0", " ", "not valid!", "A-Z_9", "\u00e9")
_ODD_KEYS = ("", "0", "A B!", "zz_extra")
#: Keywords whose subschemas are examined keyword by keyword, not broken as a whole.
_CONTAINERS = frozenset(
    {"properties", "patternProperties", "items", "prefixItems", "additionalItems", "allOf",
     "$ref", "then", "else", "if", "unevaluatedItems"}
)  # fmt: skip

#: Draws a value a subschema accepts (None when none could be drawn).
Draw = Callable[[Any], Any]


@dataclass(frozen=True)
class Breakers:
    """Values proposed to break one keyword, or why there are none.

    Attributes:
        values: the proposals, best first.
        reason: why no breaking value can exist or be built (``values`` is then empty).
        container: the keyword holds subschemas examined keyword by keyword.
    """

    values: tuple[Any, ...] = ()
    reason: str | None = None
    container: bool = False


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _finite(value: Any) -> bool:
    """A number that is not infinite or NaN (an int of any size is; ``math.isfinite`` would
    raise on one too large for a float)."""
    return _is_number(value) and (isinstance(value, int) or math.isfinite(value))


def _types(node: dict[str, Any]) -> set[str]:
    kind = node.get("type")
    if isinstance(kind, str):
        return {kind}
    return {k for k in kind if isinstance(k, str)} if isinstance(kind, list) else set()


def _item(node: dict[str, Any], current: Any, draw: Draw) -> Any:
    """An item the array's ``items`` accepts (or the array's own first item)."""
    if isinstance(current, list) and current:
        return current[0]
    items = node.get("items")
    drawn = draw(items) if isinstance(items, dict | bool) else None
    return 1 if drawn is None else drawn


def _numbers(node: dict[str, Any], keyword: str, bound: Any) -> Breakers:
    if not _finite(bound):
        return Breakers(reason=f"{keyword} {bound!r} is not a finite number")
    integer = "integer" in _types(node) and "number" not in _types(node)
    below = {"minimum": True, "exclusiveMinimum": True}.get(keyword, False)
    exclusive = keyword.startswith("exclusive")
    if exclusive:
        edge = (math.floor(bound) if below else math.ceil(bound)) if integer else bound
        return Breakers((edge, edge - 1 if below else edge + 1))
    if integer:
        edge = math.ceil(bound) - 1 if below else math.floor(bound) + 1
        return Breakers((edge,))
    if isinstance(bound, int) and abs(bound) >= 1e15:  # no float near it: integers only
        return Breakers((bound - 1 if below else bound + 1,))
    step = 1 if abs(bound) < 1e15 else abs(bound) / 1e6
    if below:
        return Breakers((bound - step, bound - 0.5))
    return Breakers((bound + step, bound + 0.5))


def _multiple(node: dict[str, Any], step: Any) -> Breakers:
    if not _finite(step) or step <= 0:
        return Breakers(reason=f"multipleOf {step!r} is not a positive number")
    integer = "integer" in _types(node) and "number" not in _types(node)
    if integer and step == 1:
        return Breakers(reason="every integer is a multiple of 1")
    if integer:
        if isinstance(step, int) or step.is_integer():
            return Breakers((int(step) + 1, 1))
        # Integers that are not multiples of a fractional step: 1, 2, 3...
        return Breakers((1, 2, 3))
    if isinstance(step, int) and step >= 1e15:
        return Breakers((step + 1, 1))
    return Breakers((step / 2, step * 1.5, step + 1, 1))


def _string_length(keyword: str, bound: Any) -> Breakers:
    if not isinstance(bound, int) or isinstance(bound, bool) or bound < 0:
        return Breakers(reason=f"{keyword} {bound!r} is not a length")
    if keyword == "minLength":
        if bound == 0:
            return Breakers(reason="every string has at least 0 characters")
        if bound > _LONGEST:
            return Breakers(reason=f"a string of {bound - 1} characters is too long to build")
        return Breakers(("a" * (bound - 1),))
    if bound >= _LONGEST:
        return Breakers(reason=f"a string of {bound + 1} characters is too long to build")
    return Breakers(("a" * (bound + 1), "1" * (bound + 1)))


def _array_length(
    node: dict[str, Any], keyword: str, bound: Any, current: Any, draw: Draw
) -> Breakers:
    if not isinstance(bound, int) or isinstance(bound, bool) or bound < 0:
        return Breakers(reason=f"{keyword} {bound!r} is not a count")
    if keyword == "minItems":
        if bound == 0:
            return Breakers(reason="every array has at least 0 items")
        have = current if isinstance(current, list) else []
        return Breakers((have[: bound - 1], [_item(node, current, draw)] * (bound - 1)))
    if bound >= _LONGEST:
        return Breakers(reason=f"an array of {bound + 1} items is too long to build")
    have = list(current) if isinstance(current, list) else []
    extra = [draw(node.get("items")) if isinstance(node.get("items"), dict) else None]
    padded = have + [_item(node, current, draw)] * (bound + 1 - len(have))
    distinct = list(range(bound + 1))
    return Breakers(tuple(v for v in (padded, distinct, have + extra * (bound + 1)) if v))


def _object_size(node: dict[str, Any], keyword: str, bound: Any, current: Any) -> Breakers:
    if not isinstance(bound, int) or isinstance(bound, bool) or bound < 0:
        return Breakers(reason=f"{keyword} {bound!r} is not a count")
    have = dict(current) if isinstance(current, dict) else {}
    if keyword == "minProperties":
        if bound == 0:
            return Breakers(reason="every object has at least 0 properties")
        return Breakers((dict(list(have.items())[: bound - 1]),))
    if bound >= _LONGEST:
        return Breakers(reason=f"an object of {bound + 1} properties is too long to build")
    grown = dict(have)
    for name in node.get("properties") or {}:
        if len(grown) > bound:
            break
        grown.setdefault(name, 1)
    index = 0
    while len(grown) <= bound:
        grown.setdefault(f"p{index}", 1)
        index += 1
    return Breakers((grown,))


def _other_values(values: list[Any]) -> tuple[Any, ...]:
    """Values near ``values`` but not among them."""
    out: list[Any] = []
    for value in values:
        if isinstance(value, str):
            out.append(value + "x")
        elif _is_number(value):
            out.append(value + 1)
        elif isinstance(value, bool):
            out.append(not value)
        elif isinstance(value, list):
            out.append([*value, 0])
        elif isinstance(value, dict):
            out.append({**value, "zz_extra": 0})
    out += ["zz_not_listed", 123456, None, False]
    return tuple(v for v in out if not any(v == x and type(v) is type(x) for x in values))


def _required(names: Any, current: Any, node: dict[str, Any], draw: Draw) -> Breakers:
    if not isinstance(names, list) or not names:
        return Breakers(reason="no property is required")
    have = dict(current) if isinstance(current, dict) else {}
    properties = node.get("properties") or {}
    for name in names:
        if name not in have:
            drawn = draw(properties.get(name, True)) if isinstance(properties, dict) else None
            have[name] = 1 if drawn is None else drawn
    return Breakers(tuple({k: v for k, v in have.items() if k != name} for name in names))


def _dependent(spec: Any, current: Any, node: dict[str, Any], draw: Draw) -> Breakers:
    if not isinstance(spec, dict) or not spec:
        return Breakers(reason="no property depends on another")
    have = dict(current) if isinstance(current, dict) else {}
    properties = node.get("properties") if isinstance(node.get("properties"), dict) else {}
    out = []
    for trigger, needed in spec.items():
        if not isinstance(needed, list):
            needed = []  # dependentSchemas: the trigger alone, the subschema judges the rest
        drawn = draw(properties.get(trigger, True)) if properties else None
        value = {k: v for k, v in have.items() if k not in needed}
        value[trigger] = 1 if drawn is None else drawn
        out.append(value)
    return Breakers(tuple(out))


def _extra(node: dict[str, Any], value: Any, current: Any) -> Breakers:
    if value is True or value == {}:
        return Breakers(reason="it allows every property")
    have = dict(current) if isinstance(current, dict) else {}
    extras: list[Any] = [1, "a", None, {}, []] if value is not False else [1]
    return Breakers(tuple({**have, "zz_extra": extra} for extra in extras))


def breakers(keyword: str, value: Any, node: dict[str, Any], current: Any, draw: Draw) -> Breakers:
    """Values meant to break ``keyword`` (written ``value`` in ``node``) where the document
    has ``current`` (:data:`MISSING` when nothing is there).

    Args:
        keyword: the keyword's name.
        value: its value in the schema.
        node: the subschema holding it.
        current: the value already there in a document the schema accepts.
        draw: draws a value a subschema accepts.
    """
    if keyword in _CONTAINERS:
        return Breakers(container=True)
    if keyword == "type":
        declared = _types(node)
        if "number" in declared:
            declared.add("integer")
        others = [v for t, v in TYPE_SAMPLES.items() if t not in declared]
        if "integer" in declared and "number" not in declared:
            others.insert(0, 1.5)
        return Breakers(tuple(others)) if others else Breakers(reason="every type is allowed")
    if keyword == "enum":
        if not isinstance(value, list):
            return Breakers(reason="enum is not a list")
        return Breakers(_other_values(value))
    if keyword == "const":
        return Breakers(_other_values([value]))
    if keyword == "not":
        drawn = draw(value)
        if value is True or value == {}:
            return Breakers(reason="`not` of a schema that accepts everything refuses everything")
        return Breakers(() if drawn is None else (drawn,), None if drawn is not None else
                        "no value the negated schema accepts could be drawn")  # fmt: skip
    if keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        return _numbers(node, keyword, value)
    if keyword == "multipleOf":
        return _multiple(node, value)
    if keyword in ("minLength", "maxLength"):
        return _string_length(keyword, value)
    if keyword == "pattern":
        return Breakers(_ODD_STRINGS)
    if keyword == "format":
        return Breakers(("not a " + str(value), "", "2024-13-45T25:61:00", "::", "a b"))
    if keyword in ("minItems", "maxItems"):
        return _array_length(node, keyword, value, current, draw)
    if keyword == "uniqueItems":
        if value is not True:
            return Breakers(reason="uniqueItems false allows repeated items")
        item = _item(node, current, draw)
        have = list(current) if isinstance(current, list) and current else [item]
        return Breakers(([item, item], [*have, have[0]], [1, 1], ["a", "a"]))
    if keyword == "contains":
        if value is False:
            return Breakers(([], [1]))
        have = list(current) if isinstance(current, list) else []
        return Breakers(([], [v for v in have if v is not None], [None], ["a"], [1]))
    if keyword in ("minContains", "maxContains"):
        if not isinstance(value, int) or (keyword == "minContains" and value == 0):
            return Breakers(reason=f"{keyword} {value!r} allows any count")
        matching = draw(node.get("contains", True))
        item = 1 if matching is None else matching
        count = value - 1 if keyword == "minContains" else value + 1
        if count > _LONGEST:
            return Breakers(reason=f"an array of {count} items is too long to build")
        return Breakers(([item] * count,))
    if keyword in ("minProperties", "maxProperties"):
        return _object_size(node, keyword, value, current)
    if keyword == "required":
        return _required(value, current, node, draw)
    if keyword in ("dependentRequired", "dependentSchemas", "dependencies"):
        return _dependent(value, current, node, draw)
    if keyword in ("additionalProperties", "unevaluatedProperties"):
        return _extra(node, value, current)
    if keyword == "propertyNames":
        named = dict(current) if isinstance(current, dict) else {}
        return Breakers(tuple({**named, key: 1} for key in _ODD_KEYS))
    if keyword in ("anyOf", "oneOf"):
        branches = value if isinstance(value, list) else []
        drawn = [d for d in (draw(b) for b in branches) if d is not None]
        # oneOf: a value two branches accept; anyOf: a value of a type no branch names.
        return Breakers((*drawn, *TYPE_SAMPLES.values()))
    return Breakers(reason=f"the Doctor builds no document against {keyword}")
