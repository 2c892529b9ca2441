"""The one way the server builds a jsonschema validator for a user's schema.

jsonschema matches ``pattern`` and ``patternProperties`` with Python's ``re``, a backtracking
engine: ``"^(a+)+$"`` against 28 ``a`` and a ``!`` holds the GIL for 20 s, and each ``a`` doubles
it. Here those keywords (and ``additionalProperties``, ``unevaluatedProperties``, which match the
same patterns, and the ``regex`` format) run on RE2, whose time is linear in the text, with the
meaning ECMA-262 gives them (:mod:`app.engine.grammars.ecma_regex`).

RE2 cannot run backreferences or lookaround (no linear-time engine can). Such a pattern is never
a silent pass: the value it applies to gets a validation error saying that the pattern could not
be checked, and why.

References stay inside the document: :func:`app.engine.grammars.schema_refs.check_refs` runs before
a
validator is built, and the validator's registry refuses to retrieve anything (no network, no
file) should a reference still reach it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import jsonschema
import referencing
import referencing.exceptions
from jsonschema.exceptions import FormatError, ValidationError
from jsonschema.protocols import Validator

from app.engine.grammars.ecma_regex import regex_problem, regex_search
from app.engine.grammars.schema_refs import check_refs

__all__ = [
    "REGISTRY",
    "draft_of",
    "error_list",
    "format_checker",
    "meta_validator",
    "schema_validator",
]

# Second line of defence behind check_refs: nothing is ever fetched. jsonschema's default
# registry (no registry= given) retrieves http(s) and file: references with urllib; a bare
# referencing.Registry retrieves nothing (every unknown URI is NoSuchResource), and jsonschema
# adds the meta-schemas it bundles to it.
REGISTRY: referencing.Registry[Any] = referencing.Registry()


def _unchecked(pattern: Any) -> ValidationError:
    if not isinstance(pattern, str):
        return ValidationError(f"pattern {pattern!r} could not be checked: it is not a string")
    return ValidationError(f"pattern {pattern!r} could not be checked: {regex_problem(pattern)}")


def _pattern(validator: Any, pattern: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "string"):
        return
    found = regex_search(pattern, instance) if isinstance(pattern, str) else None
    if found is None:
        yield _unchecked(pattern)
    elif not found:
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            found = regex_search(pattern, key)
            if found is None:
                yield _unchecked(pattern)
                break
            if found:
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _matched_by_patterns(schema: Any, key: str) -> bool:
    return any(regex_search(p, key) for p in schema.get("patternProperties", {}))


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    extras = {k for k in instance if k not in properties and not _matched_by_patterns(schema, k)}
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        joined = ", ".join(repr(each) for each in sorted(extras))
        if "patternProperties" in schema:
            patterns = ", ".join(repr(each) for each in sorted(schema["patternProperties"]))
            verb = "does" if len(extras) == 1 else "do"
            yield ValidationError(f"{joined} {verb} not match any of the regexes: {patterns}")
        else:
            verb = "was" if len(extras) == 1 else "were"
            yield ValidationError(
                f"Additional properties are not allowed ({joined} {verb} unexpected)"
            )


def _is_valid(errors: Iterator[ValidationError]) -> bool:
    return next(errors, None) is None


def _evaluated_keys(validator: Any, instance: Any, schema: Any) -> set[str]:
    """The keys of ``instance`` that ``schema`` evaluates (jsonschema's own walk, with RE2)."""
    if validator.is_type(schema, "boolean"):
        return set()
    keys: set[str] = set()
    for keyword in ("$ref", "$dynamicRef", "$recursiveRef"):
        if isinstance(ref := schema.get(keyword), str):
            resolved = validator._resolver.lookup(ref)
            inner = validator.evolve(schema=resolved.contents, _resolver=resolved.resolver)
            keys |= _evaluated_keys(inner, instance, resolved.contents)
    if validator.is_type(properties := schema.get("properties"), "object"):
        keys |= properties.keys() & instance.keys()
    for keyword in ("additionalProperties", "unevaluatedProperties"):
        if (subschema := schema.get(keyword)) is not None:
            keys |= {k for k, v in instance.items() if _is_valid(validator.descend(v, subschema))}
    keys |= {k for k in instance if _matched_by_patterns(schema, k)}
    for key, subschema in schema.get("dependentSchemas", {}).items():
        if key in instance:
            keys |= _evaluated_keys(validator, instance, subschema)
    for keyword in ("allOf", "oneOf", "anyOf"):
        for subschema in schema.get(keyword, []):
            if _is_valid(validator.descend(instance, subschema)):
                keys |= _evaluated_keys(validator, instance, subschema)
    if "if" in schema:
        if validator.evolve(schema=schema["if"]).is_valid(instance):
            keys |= _evaluated_keys(validator, instance, schema["if"])
            if "then" in schema:
                keys |= _evaluated_keys(validator, instance, schema["then"])
        elif "else" in schema:
            keys |= _evaluated_keys(validator, instance, schema["else"])
    return keys


def _unevaluated_properties(
    validator: Any, unevaluated: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    evaluated = _evaluated_keys(validator, instance, schema)
    bad = [
        key
        for key in instance
        if key not in evaluated
        and not _is_valid(validator.descend(instance[key], unevaluated, path=key, schema_path=key))
    ]
    if not bad:
        return
    joined = ", ".join(repr(each) for each in sorted(bad, key=str))
    verb = "was" if len(bad) == 1 else "were"
    if unevaluated is False:
        yield ValidationError(
            f"Unevaluated properties are not allowed ({joined} {verb} unexpected)"
        )
    else:
        yield ValidationError(
            "Unevaluated properties are not valid under the given schema "
            f"({joined} {verb} unevaluated and invalid)"
        )


class _Formats(jsonschema.FormatChecker):
    """A draft's format checkers, with ``regex`` checked by RE2 (what the server can run)."""

    def check(self, instance: object, format: str) -> None:  # noqa: A002 (jsonschema's name)
        if format == "regex" and isinstance(instance, str):
            if (problem := regex_problem(instance)) is not None:
                raise FormatError(f"{instance!r} is not a 'regex' the server can run: {problem}")
            return
        super().check(instance, format)


def _regex_format(instance: object) -> bool:
    return not isinstance(instance, str) or regex_problem(instance) is None


_KEYWORDS = {
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
    "unevaluatedProperties": _unevaluated_properties,
}


@functools.cache
def _safe_class(base: type[Validator]) -> tuple[type[Validator], jsonschema.FormatChecker]:
    checker = _Formats(formats=())
    checker.checkers = {**base.FORMAT_CHECKER.checkers, "regex": (_regex_format, ())}
    keywords = {k: v for k, v in _KEYWORDS.items() if k in base.VALIDATORS}
    cls = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
        base, keywords, format_checker=checker
    )
    return cls, checker


def draft_of(schema: Any) -> type[Validator]:
    """The jsonschema class of ``schema``'s draft (its ``$schema``; 2020-12 otherwise, and when
    ``$schema`` is not a string: jsonschema's own lookup raised on one, and the meta-schema then
    says what is wrong with it)."""
    if isinstance(schema, dict) and not isinstance(schema.get("$schema", ""), str):
        return jsonschema.Draft202012Validator
    return jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)


def _class_for(schema: Any) -> tuple[type[Validator], jsonschema.FormatChecker]:
    return _safe_class(draft_of(schema))


def schema_validator(schema: Any, *, source: str | None = None, formats: bool = True) -> Validator:
    """A validator for a user's schema: references checked first, regexes on RE2, no retrieval.

    Args:
        schema: the parsed JSON Schema (its ``$schema`` picks the draft; 2020-12 otherwise).
        source: its JSON text, so that a refused reference names its line and column.
        formats: whether ``format`` is asserted (with every checker the draft has).

    Raises:
        ReferenceRefused: a reference leaves the document, leads nowhere or loops in place.
    """
    check_refs(schema, source=source)
    cls, checker = _class_for(schema)
    return cls(schema, format_checker=checker if formats else None, registry=REGISTRY)


def format_checker(schema: Any) -> jsonschema.FormatChecker:
    """The format checker :func:`schema_validator` gives ``schema`` (its draft's, regex on RE2)."""
    return _class_for(schema)[1]


def meta_validator(schema: Any) -> Validator:
    """The validator of ``schema``'s draft for its meta-schema (is it a valid JSON Schema?)."""
    cls, _ = _class_for(schema)
    return cls(cls.META_SCHEMA, registry=REGISTRY)


def error_list(validator: Validator, instance: Any) -> list[ValidationError]:
    """Every error of ``instance``; a schema and document too deep to walk, or a reference that
    does not resolve, is one error at the root rather than an exception."""
    try:
        return list(validator.iter_errors(instance))
    except RecursionError:
        message = "the schema and the document nest too deeply to validate"
    except referencing.exceptions.Unresolvable as unresolvable:
        message = f"a reference does not resolve inside the document: {unresolvable}"
    return [ValidationError(message)]
