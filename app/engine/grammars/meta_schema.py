"""A fast yes to "is this a valid JSON Schema?": its draft's meta-schema compiled into checks.

jsonschema spends ~6 ms on the meta-schema check of a typical real-world schema (a fifth of
xgrammar's whole compile): each keyword of each subschema goes through ``descend``, ``evolve``
and a reference lookup that joins URLs. Almost every schema a user sends is valid, and a valid
one needs no message, only the verdict. :func:`known_valid` compiles a draft's meta-schema once
into plain Python checks (references resolved once, ``$dynamicRef "#meta"`` and
``$recursiveRef "#"`` to the root they always reach from it) and answers ``True`` only when the
schema is valid as :func:`app.engine.grammars.jsonschema_safe.meta_validator` would judge it
(regexes on
RE2, no format assertion). Anything else (an invalid schema, a construct or keyword the checks do
not cover, a document nested deeper than ``MAX_DEPTH``) answers ``False``, and the caller asks
jsonschema, which finds the error and its message as before.

The one property that matters: ``known_valid(schema)`` implies jsonschema finds no error. Where
exactness costs effort (``uniqueItems`` over objects, a keyword no meta-schema uses), the checks
answer ``False`` rather than guess.
"""

from __future__ import annotations

import functools
import numbers
from collections.abc import Callable
from typing import Any

import jsonschema
import referencing
import referencing.jsonschema
from jsonschema.protocols import Validator

from app.engine.grammars.ecma_regex import regex_search
from app.engine.grammars.jsonschema_safe import REGISTRY, draft_of

__all__ = ["MAX_DEPTH", "known_valid", "warm"]

# JSON nesting past which the checks give the verdict back to jsonschema: its own walk of a
# deeper document may run out of stack (its error says so), where these checks would not.
MAX_DEPTH = 48

# (instance, nesting depth of the instance) -> valid
Check = Callable[[Any, int], bool]
# A referencing.Resolver (the package exports no name for it).
Resolver = Any


class _Unsupported(Exception):
    """The meta-schema uses something these checks do not cover: jsonschema judges alone."""


class _TooDeep(Exception):
    pass


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Number) and not isinstance(value, bool)


def _is_integer_draft4(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_integer(value: Any) -> bool:  # draft 6 on: 1.0 is an integer
    if isinstance(value, float):
        return value.is_integer()
    return _is_integer_draft4(value)


_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda value: isinstance(value, dict),
    "array": lambda value: isinstance(value, list),
    "string": lambda value: isinstance(value, str),
    "boolean": lambda value: isinstance(value, bool),
    "null": lambda value: value is None,
    "number": _is_number,
    "integer": _is_integer,
}

# The drafts these checks mirror, with the type checker each has in jsonschema.
_DRAFTS: dict[type[Validator], dict[str, Callable[[Any], bool]]] = {
    jsonschema.Draft4Validator: {**_TYPES, "integer": _is_integer_draft4},
    jsonschema.Draft6Validator: _TYPES,
    jsonschema.Draft7Validator: _TYPES,
    jsonschema.Draft201909Validator: _TYPES,
    jsonschema.Draft202012Validator: _TYPES,
}
_LEGACY_REF = {jsonschema.Draft4Validator, jsonschema.Draft6Validator, jsonschema.Draft7Validator}


def _primitive_key(value: Any) -> tuple[str, Any]:
    """A key equal for two values jsonschema calls equal (numbers: 1 == 1.0, never True)."""
    if isinstance(value, bool):
        return ("bool", value)
    if value is None:
        return ("null", None)
    if isinstance(value, str):
        return ("str", value)
    if _is_number(value):
        return ("num", value)
    raise TypeError  # an array or object: not decided here


def _unique(items: list[Any]) -> bool:
    """True only when jsonschema's ``uniqueItems`` holds for ``items`` (False: undecided too)."""
    try:
        keys = [_primitive_key(item) for item in items]
    except TypeError:
        return False
    return len(set(keys)) == len(keys)


def _all(checks: list[Check]) -> Check:
    if not checks:
        return lambda instance, depth: True
    if len(checks) == 1:
        return checks[0]
    return lambda instance, depth: all(check(instance, depth) for check in checks)


class _Builder:
    """Compiles one draft's meta-schema into checks, each subschema once."""

    def __init__(self, base: type[Validator]) -> None:
        if base not in _DRAFTS:
            raise _Unsupported(base.__name__)
        self._types = _DRAFTS[base]
        self._legacy_ref = base in _LEGACY_REF
        self._keywords = set(base.VALIDATORS)
        self._root_schema = base.META_SCHEMA
        self._specification = referencing.jsonschema.specification_with(base.META_SCHEMA["$schema"])
        # What jsonschema resolves against: the meta-schemas it bundles, then ours (empty).
        self._registry = _specifications().combine(REGISTRY)
        self._built: dict[int, Check] = {}
        self._pending: dict[int, list[Check]] = {}

    def root(self) -> Check:
        resolver = self._registry.resolver_with_root(
            self._specification.create_resource(self._root_schema)
        )
        self._root_resolver = resolver
        return self._schema(self._root_schema, resolver)

    def _schema(self, schema: Any, resolver: Resolver) -> Check:
        if schema is True:
            return lambda instance, depth: True
        if schema is False:
            return lambda instance, depth: False
        if not isinstance(schema, dict):
            raise _Unsupported(repr(schema))
        key = id(schema)
        if key in self._built:
            return self._built[key]
        if key in self._pending:  # a loop: call through a cell filled once built
            cell = self._pending[key]
            return lambda instance, depth: cell[0](instance, depth)
        self._pending[key] = cell = []
        resolver = resolver.in_subresource(self._specification.create_resource(schema))
        check = self._keywords_of(schema, resolver)
        cell.append(check)
        del self._pending[key]
        self._built[key] = check
        return check

    def _keywords_of(self, schema: dict[str, Any], resolver: Resolver) -> Check:
        items = [("$ref", schema["$ref"])] if self._legacy_ref and "$ref" in schema else []
        checks = []
        for keyword, value in items or schema.items():
            if keyword not in self._keywords or keyword == "format":  # annotations only
                continue
            compile_keyword = _KEYWORDS.get(keyword)
            if compile_keyword is None:
                raise _Unsupported(keyword)
            checks.append(compile_keyword(self, value, schema, resolver))
        return _all(checks)

    def sub(self, schema: Any, resolver: Resolver) -> Check:
        """The check of a subschema met inside the meta-schema."""
        return self._schema(schema, resolver)

    def ref(self, ref: Any, resolver: Resolver) -> Check:
        if not isinstance(ref, str):
            raise _Unsupported("$ref")
        resolved = resolver.lookup(ref)
        contents = resolved.contents
        if contents is True or contents is False:
            return self._schema(contents, resolved.resolver)
        key = id(contents)
        if key in self._built:
            return self._built[key]
        if key in self._pending:
            cell = self._pending[key]
            return lambda instance, depth: cell[0](instance, depth)
        # As jsonschema's reference: the target's own resource, no in_subresource of its own.
        self._pending[key] = cell = []
        check = self._keywords_of(contents, resolved.resolver)
        cell.append(check)
        del self._pending[key]
        self._built[key] = check
        return check

    def dynamic_root(self, anchor_keyword: str, anchor: Any) -> Check:
        """A dynamic reference that validation from the root always resolves to the root."""
        if self._root_schema.get(anchor_keyword) != anchor:
            raise _Unsupported(anchor_keyword)
        return self._schema(self._root_schema, self._root_resolver)

    def type_of(self, name: Any) -> Callable[[Any], bool]:
        if not isinstance(name, str) or name not in self._types:
            raise _Unsupported(f"type {name!r}")
        return self._types[name]


def _type(builder: _Builder, value: Any, schema: Any, resolver: Resolver) -> Check:
    names = value if isinstance(value, list) else [value]
    tests = [builder.type_of(name) for name in names]
    return lambda instance, depth: any(test(instance) for test in tests)


def _child(check: Check, instance: Any, depth: int) -> bool:
    if depth >= MAX_DEPTH:
        raise _TooDeep
    return check(instance, depth + 1)


def _properties(builder: _Builder, value: Any, schema: Any, resolver: Resolver) -> Check:
    checks = {name: builder.sub(sub, resolver) for name, sub in value.items()}

    def check(instance: Any, depth: int) -> bool:
        if not isinstance(instance, dict):
            return True
        for name, item in instance.items():
            each = checks.get(name)
            if each is not None and not _child(each, item, depth):
                return False
        return True

    return check


def _matched(patterns: list[str], name: str) -> bool:
    return any(regex_search(pattern, name) for pattern in patterns)


def _additional_properties(builder: _Builder, value: Any, schema: Any, resolver: Resolver) -> Check:
    known = set(schema.get("properties", {}))
    patterns = list(schema.get("patternProperties", {}))
    if value is True:
        return lambda instance, depth: True
    each = None if value is False else builder.sub(value, resolver)

    def check(instance: Any, depth: int) -> bool:
        if not isinstance(instance, dict):
            return True
        for name, item in instance.items():
            if name in known or (patterns and _matched(patterns, name)):
                continue
            if each is None or not _child(each, item, depth):
                return False
        return True

    return check


def _pattern_properties(builder: _Builder, value: Any, schema: Any, resolver: Resolver) -> Check:
    checks = [(pattern, builder.sub(sub, resolver)) for pattern, sub in value.items()]

    def check(instance: Any, depth: int) -> bool:
        if not isinstance(instance, dict):
            return True
        for pattern, each in checks:
            for name, item in instance.items():
                found = regex_search(pattern, name)
                if found is None:  # a pattern RE2 cannot run: jsonschema_safe says so
                    return False
                if found and not _child(each, item, depth):
                    return False
        return True

    return check


def _property_names(builder: _Builder, value: Any, schema: Any, resolver: Resolver) -> Check:
    each = builder.sub(value, resolver)

    def check(instance: Any, depth: int) -> bool:
        if not isinstance(instance, dict):
            return True
        return all(_child(each, name, depth) for name in instance)

    return check


def _items(builder: _Builder, value: Any, schema: Any, resolver: Resolver) -> Check:
    if isinstance(value, list) or "prefixItems" in schema:  # the tuple forms: no meta uses them
        raise _Unsupported("items")
    if not isinstance(value, dict) and builder.type_of("integer") is _is_integer_draft4:
        raise _Unsupported("items")  # draft 4 reads a boolean as a tuple
    each = builder.sub(value, resolver)

    def check(instance: Any, depth: int) -> bool:
        if not isinstance(instance, list):
            return True
        return all(_child(each, item, depth) for item in instance)

    return check


def _required(builder: _Builder, value: Any, schema: Any, resolver: Resolver) -> Check:
    names = list(value)
    return lambda instance, depth: (
        not isinstance(instance, dict) or all(name in instance for name in names)
    )


def _number_bound(test: Callable[[Any], bool]) -> Check:
    return lambda instance, depth: not _is_number(instance) or test(instance)


def _minimum(builder: _Builder, value: Any, schema: Any, resolver: Resolver) -> Check:
    if builder.type_of("integer") is _is_integer_draft4 and schema.get("exclusiveMinimum", False):
        return _number_bound(lambda instance: instance > value)
    return _number_bound(lambda instance: instance >= value)


def _exclusive_minimum(builder: _Builder, value: Any, schema: Any, resolver: Resolver) -> Check:
    return _number_bound(lambda instance: instance > value)


def _min_items(builder: _Builder, value: Any, schema: Any, resolver: Resolver) -> Check:
    return lambda instance, depth: not isinstance(instance, list) or len(instance) >= value


def _unique_items(builder: _Builder, value: Any, schema: Any, resolver: Resolver) -> Check:
    if not value:
        return lambda instance, depth: True
    return lambda instance, depth: not isinstance(instance, list) or _unique(instance)


def _enum(builder: _Builder, value: Any, schema: Any, resolver: Resolver) -> Check:
    if not all(isinstance(each, str) for each in value):
        raise _Unsupported("enum")
    names = frozenset(value)
    return lambda instance, depth: isinstance(instance, str) and instance in names


def _pattern(builder: _Builder, value: Any, schema: Any, resolver: Resolver) -> Check:
    if not isinstance(value, str):
        raise _Unsupported("pattern")
    return lambda instance, depth: (
        not isinstance(instance, str) or bool(regex_search(value, instance))
    )


def _any_of(builder: _Builder, value: Any, schema: Any, resolver: Resolver) -> Check:
    checks = [builder.sub(sub, resolver) for sub in value]
    return lambda instance, depth: any(check(instance, depth) for check in checks)


def _all_of(builder: _Builder, value: Any, schema: Any, resolver: Resolver) -> Check:
    return _all([builder.sub(sub, resolver) for sub in value])


def _dependencies(builder: _Builder, value: Any, schema: Any, resolver: Resolver) -> Check:
    names: dict[str, list[Any]] = {}
    schemas: dict[str, Check] = {}
    for name, dependency in value.items():
        if isinstance(dependency, list):
            names[name] = dependency
        else:
            schemas[name] = builder.sub(dependency, resolver)

    def check(instance: Any, depth: int) -> bool:
        if not isinstance(instance, dict):
            return True
        for name, needed in names.items():
            if name in instance and not all(each in instance for each in needed):
                return False
        return all(each(instance, depth) for name, each in schemas.items() if name in instance)

    return check


def _ref(builder: _Builder, value: Any, schema: Any, resolver: Resolver) -> Check:
    return builder.ref(value, resolver)


def _dynamic_ref(builder: _Builder, value: Any, schema: Any, resolver: Resolver) -> Check:
    if value != "#meta":
        raise _Unsupported("$dynamicRef")
    return builder.dynamic_root("$dynamicAnchor", "meta")


def _recursive_ref(builder: _Builder, value: Any, schema: Any, resolver: Resolver) -> Check:
    if value != "#":
        raise _Unsupported("$recursiveRef")
    return builder.dynamic_root("$recursiveAnchor", True)


_KEYWORDS: dict[str, Callable[[_Builder, Any, Any, Resolver], Check]] = {
    "type": _type,
    "properties": _properties,
    "additionalProperties": _additional_properties,
    "patternProperties": _pattern_properties,
    "propertyNames": _property_names,
    "items": _items,
    "required": _required,
    "minimum": _minimum,
    "exclusiveMinimum": _exclusive_minimum,
    "minItems": _min_items,
    "uniqueItems": _unique_items,
    "enum": _enum,
    "pattern": _pattern,
    "anyOf": _any_of,
    "allOf": _all_of,
    "dependencies": _dependencies,
    "$ref": _ref,
    "$dynamicRef": _dynamic_ref,
    "$recursiveRef": _recursive_ref,
}


@functools.cache
def _specifications() -> referencing.Registry[Any]:
    import jsonschema_specifications  # type: ignore[import-untyped]  # jsonschema's own

    registry: referencing.Registry[Any] = jsonschema_specifications.REGISTRY
    return registry


@functools.cache
def _checks_for(base: type[Validator]) -> Check | None:
    try:
        return _Builder(base).root()
    except _Unsupported:
        return None


def known_valid(schema: Any) -> bool:
    """Whether ``schema`` is, for certain, valid against its draft's meta-schema.

    Args:
        schema: a parsed JSON Schema; its ``$schema`` picks the draft as jsonschema picks it
            (2020-12 otherwise).


    Returns:
        True only when jsonschema (with :mod:`app.engine.grammars.jsonschema_safe`'s keywords)
        finds no
        error; False when it would, or when these checks cannot tell.
    """
    check = _checks_for(draft_of(schema))
    if check is None:
        return False
    try:
        return check(schema, 0)
    except (_TooDeep, RecursionError):
        return False


def warm() -> None:
    """Build every draft's checks now (a compile worker does it before its memory is capped)."""
    for base in _DRAFTS:
        _checks_for(base)
