"""Check a finished output against the source's own semantics, not the grammar's.

The grammar guarantees syntax, not every constraint (xgrammar ignores ``multipleOf``, for one):
this verdict is where a user sees the difference.
"""

from __future__ import annotations

import functools
import json

from jsonschema.protocols import Validator

from app.engine.grammars.jsonschema_safe import error_list, schema_validator
from app.engine.grammars.spec import GrammarSpec
from app.engine.records import Validation, ValidationError
from app.jsontext import loads
from app.paths import format_path

__all__ = ["validate_output"]

_NO_VERDICT = (
    "the validator cannot judge this document: a number in it is too large to divide by the "
    "schema's multipleOf (a float)"
)


def validate_output(spec: GrammarSpec, text: str, *, complete: bool) -> Validation:
    """Validate ``text`` against ``spec``.

    JSON Schema sources are checked with ``jsonschema`` (formats included; patterns on RE2,
    references inside the document only: :mod:`app.engine.grammars.jsonschema_safe`). For EBNF and
    regex
    the source is the grammar itself, so the output is valid when the grammar is complete.

    Args:
        spec: the grammar request the output was generated under.
        text: the whole output.
        complete: whether the matcher reached an accepting state.

    Raises:
        ReferenceRefused: the schema has a reference that leaves the document (its compile
            refuses it first).
    """
    if not spec.is_json:
        if complete:
            return Validation(True)
        return Validation(False, (ValidationError("$", "the output ends before the grammar does"),))
    try:
        instance = loads(text, long_integers=True)  # judged whatever its integers' length
    except json.JSONDecodeError as exc:
        message = f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        return Validation(False, (ValidationError("$", message),))
    try:
        found = error_list(_validator(spec.source), instance)
    except ArithmeticError:  # jsonschema's multipleOf divides by a float: past 1e308, no verdict
        return Validation(False, (ValidationError("$", _NO_VERDICT),))
    errors = sorted(found, key=lambda e: list(map(str, e.absolute_path)))
    return Validation(
        not errors,
        tuple(ValidationError(format_path(e.absolute_path), e.message) for e in errors),
    )


@functools.lru_cache(maxsize=64)
def _validator(source: str) -> Validator:
    """One validator per schema text: a test batch validates many texts against the same one."""
    return schema_validator(loads(source), source=source)
