"""The schema's own verdict on a document: jsonschema with every format checker it has.

``jsonschema[format-nongpl]`` brings the checkers of ``date-time``, ``time``, ``uri``,
``hostname``, ``idn-hostname``, ``iri``... A format it has no checker for passes every string,
so no witness can show it is ignored: those are listed instead.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from app.doctor.keywords import error_pointer, subschemas
from app.engine.grammars.jsonschema_safe import error_list, format_checker, schema_validator
from app.jsontext import loads
from app.paths import format_path

__all__ = ["CANNOT_JUDGE", "Judge", "Judged", "WitnessError"]

#: How an error from a validator that raised on a document begins.
CANNOT_JUDGE = "the validator cannot judge this document"


@dataclass(frozen=True)
class WitnessError:
    """Why the schema rejects a document.

    Attributes:
        path: JSONPath of the offending value in the document, e.g. ``$.tags``.
        message: the validator's message.
        pointer: JSON pointer of the schema keyword that rejects it, when known.
    """

    path: str
    message: str
    pointer: str | None = None

    def to_dict(self) -> dict[str, str]:
        """The contract's ``{"path", "message"}``."""
        return {"path": self.path, "message": self.message}


@dataclass(frozen=True)
class Judged:
    """A document judged: its parsed value (None when it is not JSON) and the errors."""

    value: Any
    errors: tuple[WitnessError, ...]

    @property
    def valid(self) -> bool:
        """Whether the schema accepts the document."""
        return not self.errors


class Judge:
    """Validates documents against one JSON Schema, keyword pointers included.

    Patterns run on RE2 and references stay inside the document
    (:mod:`app.engine.grammars.jsonschema_safe`).

    Args:
        schema: the parsed JSON Schema.

    Raises:
        ReferenceRefused: a reference leaves the document, leads nowhere or loops in place.
    """

    def __init__(self, schema: Any) -> None:
        self.schema = schema
        self._validator = schema_validator(schema)
        self._checker = format_checker(schema)

    def unchecked_formats(self) -> list[str]:
        """The ``format`` values in the schema that jsonschema cannot check."""
        used = {
            node["format"]
            for _, node in subschemas(self.schema)
            if isinstance(node.get("format"), str)
        }
        return sorted(used - set(self._checker.checkers))

    def value(self, value: Any) -> tuple[WitnessError, ...]:
        """The errors of a parsed document, in path order.

        A validator that raises on the document (``multipleOf`` on a number too large for a
        float raises ``OverflowError``) gives one error saying so, at ``$``: the document is
        not judged, and that is itself a finding.
        """
        try:
            found = error_list(self._validator, value)
        except (ArithmeticError, ValueError, RecursionError, TypeError) as exc:
            message = f"{CANNOT_JUDGE}: {type(exc).__name__}: {exc}"
            return (WitnessError("$", message, None),)
        errors = sorted(found, key=lambda e: [str(part) for part in e.absolute_path])
        return tuple(
            WitnessError(
                format_path(e.absolute_path),
                e.message,
                error_pointer(self.schema, e.absolute_schema_path),
            )
            for e in _leaves(errors)
        )

    def text(self, text: str) -> Judged:
        """Parse and judge a document; text that is not JSON is an error at ``$``."""
        try:
            value = loads(text, long_integers=True)
        except json.JSONDecodeError as exc:
            message = f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
            return Judged(None, (WitnessError("$", message),))
        return Judged(value, self.value(value))


def _leaves(errors: list[Any]) -> Iterator[Any]:
    """Each error once (the same path and keyword can be reached twice)."""
    seen: set[tuple[str, str]] = set()
    for error in errors:
        key = (str(list(error.absolute_path)), str(list(error.absolute_schema_path)))
        if key not in seen:
            seen.add(key)
            yield error
