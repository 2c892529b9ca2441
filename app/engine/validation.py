"""Check a finished output against the source's own semantics, not the grammar's.

The grammar guarantees syntax, not every constraint (xgrammar ignores ``multipleOf``, for one):
this verdict is where a user sees the difference.
"""

from __future__ import annotations

import json

import jsonschema

from app.engine.grammar import GrammarSpec
from app.engine.jsonpath import format_path
from app.engine.records import Validation, ValidationError

__all__ = ["validate_output"]


def validate_output(spec: GrammarSpec, text: str, *, complete: bool) -> Validation:
    """Validate ``text`` against ``spec``.

    JSON Schema sources are checked with ``jsonschema`` (formats included). For EBNF and regex
    the source is the grammar itself, so the output is valid when the grammar is complete.

    Args:
        spec: the grammar request the output was generated under.
        text: the whole output.
        complete: whether the matcher reached an accepting state.
    """
    if not spec.is_json:
        if complete:
            return Validation(True)
        return Validation(False, (ValidationError("$", "the output ends before the grammar does"),))
    try:
        instance = json.loads(text)
    except json.JSONDecodeError as exc:
        message = f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        return Validation(False, (ValidationError("$", message),))
    schema = json.loads(spec.source)
    validator_class = jsonschema.validators.validator_for(
        schema, default=jsonschema.Draft202012Validator
    )
    validator = validator_class(schema, format_checker=validator_class.FORMAT_CHECKER)
    errors = sorted(validator.iter_errors(instance), key=lambda e: list(map(str, e.absolute_path)))
    return Validation(
        not errors,
        tuple(ValidationError(format_path(e.absolute_path), e.message) for e in errors),
    )
