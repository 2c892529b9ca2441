"""Witnesses grouped by cause, in words: the report's ``findings``.

One finding per cause, with a count and one example: a document that is not JSON at all comes
first (it is its own cause, whatever the keyword table says), then the keywords whose built
documents the grammar accepts, then the search's other witnesses by the keywords they break,
then what the grammar refuses that the schema accepts, then keywords ignored with no witness
possible (the note says why).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from app.doctor.judge import CANNOT_JUDGE
from app.doctor.keywords import Keyword
from app.doctor.proving import Over, Proofs, Span
from app.doctor.records import Direction, Finding, KeywordFinding, Status, Witness
from app.jsontext import loads

__all__ = ["NOT_JSON", "group"]

NOT_JSON = "not_json"
#: What Python's JSON decoder says of a raw control character in a string.
_CONTROL_MESSAGE = "Invalid control character at"

#: What a document breaking each keyword has, in words.
_BREAKS = {
    "type": "values of another type",
    "enum": "values outside the enum",
    "const": "values other than the const",
    "not": "the very value `not` forbids",
    "multipleOf": "numbers that are not multiples of multipleOf",
    "minimum": "numbers below minimum",
    "maximum": "numbers above maximum",
    "exclusiveMinimum": "numbers at or below exclusiveMinimum",
    "exclusiveMaximum": "numbers at or above exclusiveMaximum",
    "minLength": "strings shorter than minLength",
    "maxLength": "strings longer than maxLength",
    "pattern": "strings the pattern does not match",
    "format": "strings that are not of the format",
    "minItems": "arrays with fewer items than minItems",
    "maxItems": "arrays with more items than maxItems",
    "uniqueItems": "arrays with repeated items",
    "contains": "arrays with no item that contains asks for",
    "minContains": "arrays with too few items contains asks for",
    "maxContains": "arrays with too many items contains asks for",
    "minProperties": "objects with fewer properties than minProperties",
    "maxProperties": "objects with more properties than maxProperties",
    "required": "objects without a required property",
    "dependentRequired": "objects with the trigger property but not its dependants",
    "dependentSchemas": "objects with the trigger property that its subschema rejects",
    "dependencies": "objects with the trigger property but not what it needs",
    "additionalProperties": "properties the schema does not allow",
    "unevaluatedProperties": "properties the schema does not evaluate",
    "propertyNames": "property names propertyNames refuses",
    "anyOf": "values no branch of anyOf accepts",
    "oneOf": "values more than one branch of oneOf accepts",
}


@dataclass
class _Group:
    cause: str
    direction: str
    keywords: list[str]
    pointers: list[str]
    example: str | None
    span: Span | None
    count: int = 1
    note: str | None = None
    texts: set[str] = field(default_factory=set)

    def finding(self) -> Finding:
        return Finding(
            self.cause,
            self.direction,
            tuple(dict.fromkeys(self.keywords)),
            tuple(dict.fromkeys(self.pointers)),
            self.count,
            self.example,
            self.span,
            self.note,
        )


def _json_error(text: str) -> tuple[str, Span] | None:
    """The decoder's message and the offending character's span, for a text that is not JSON."""
    try:
        loads(text, long_integers=True)
    except json.JSONDecodeError as exc:
        return exc.msg, (exc.pos, min(exc.pos + 1, len(text)) if text else exc.pos)
    return None


def _name(pointer: str, keywords: dict[str, Keyword]) -> str:
    found = keywords.get(pointer)
    return found.keyword if found else pointer.rsplit("/", 1)[-1]


def group(
    keywords: Sequence[Keyword],
    rows: Sequence[KeywordFinding],
    proofs: Proofs,
    witnesses: Sequence[Witness],
    *,
    typeless: Sequence[tuple[str, frozenset[str], frozenset[str]]] = (),
    strict_example: str | None = None,
) -> tuple[Finding, ...]:
    """The findings of one examination.

    Args:
        keywords: the schema's constraint keywords.
        rows: their statuses.
        proofs: the documents built against each keyword, and the over-restrictions.
        witnesses: the random search's witnesses.
        typeless: per subschema without ``type``: the types the schema accepts and the
            grammar writes.
        strict_example: a document ``strict_mode`` refuses for its undeclared properties only.
    """
    by_pointer = {k.pointer: k for k in keywords}
    groups: dict[tuple[str, str], _Group] = {}

    def add(key: tuple[str, str], make: _Group, text: str | None) -> None:
        found = groups.get(key)
        if found is None:
            groups[key] = make
            make.texts.add(text or "")
        elif text not in found.texts:
            found.count += 1
            found.texts.add(text or "")

    control = [p for p in proofs.by_pointer.values() if p.not_json]
    if control:
        names = [_name(p.pointer, by_pointer) for p in control]
        cause = (
            f"xgrammar's {', '.join(dict.fromkeys(names))} strings accept raw control"
            " characters: JSON parsers refuse the output"
        )
        first = control[0]
        make = _Group(cause, NOT_JSON, names, [p.pointer for p in control], first.not_json,
                      first.not_json_span)  # fmt: skip
        for each in control:
            add(("not_json", _CONTROL_MESSAGE), make, each.not_json)
    for witness in witnesses:
        error = (
            _json_error(witness.text) if witness.direction is Direction.GRAMMAR_ACCEPTS else None
        )
        if error is None:
            continue
        message, where = error
        cause = f"the grammar writes documents that are not JSON: {message}"
        add(("not_json", message), _Group(cause, NOT_JSON, [], [], witness.text, where),
            witness.text)  # fmt: skip

    for row in rows:
        proof = proofs.by_pointer.get(row.pointer)
        if proof is None or proof.witness is None:
            continue
        verb = "ignores" if row.status is Status.IGNORED else "does not enforce"
        what = _BREAKS.get(row.keyword, f"documents {row.keyword} rejects")
        cause = f"xgrammar {verb} {row.keyword}: the grammar accepts {what}"
        make = _Group(cause, Direction.GRAMMAR_ACCEPTS.value, [row.keyword], [row.pointer],
                      proof.witness.text, proof.span)  # fmt: skip
        add(("keyword", row.pointer), make, proof.witness.text)

    for witness in witnesses:
        if witness.direction is not Direction.GRAMMAR_ACCEPTS or _json_error(witness.text):
            continue
        cannot = [e for e in witness.errors if e.message.startswith(CANNOT_JUDGE)]
        if cannot:
            message = cannot[0].message
            add(("cannot", message.split(":", 2)[1]),
                _Group(message, Direction.GRAMMAR_ACCEPTS.value, [], [], witness.text,
                       (0, len(witness.text))), witness.text)  # fmt: skip
            continue
        pointers = list(witness.pointers)
        known = [p for p in pointers if ("keyword", p) in groups]
        if known:
            add(("keyword", known[0]), groups[("keyword", known[0])], witness.text)
            continue
        names = [_name(p, by_pointer) for p in pointers]
        what = " and ".join(_BREAKS.get(n, f"documents {n} rejects") for n in names[:2])
        cause = f"the grammar accepts {what or 'documents the schema rejects'}"
        add(("keyword", pointers[0] if pointers else "?"),
            _Group(cause, Direction.GRAMMAR_ACCEPTS.value, names, pointers, witness.text,
                   (0, len(witness.text))), witness.text)  # fmt: skip

    for pointer, accepts, writes in typeless:
        if accepts == writes:
            continue
        place = pointer or "the root"
        cause = (
            f"no type at {place}: the schema accepts {', '.join(sorted(accepts)) or 'nothing'};"
            f" the grammar writes {', '.join(sorted(writes)) or 'nothing'}"
        )
        direction = (
            Direction.SCHEMA_ACCEPTS.value if accepts - writes else Direction.GRAMMAR_ACCEPTS.value
        )
        over = next((o for o in proofs.over if o.pointers == (pointer,)), None)
        example = over.witness.text if over else None
        span = over.span if over else None
        add(("typeless", pointer),
            _Group(cause, direction, ["type"], [pointer], example, span), example)  # fmt: skip

    for over in proofs.over:
        _add_over(add, over, by_pointer)
    if strict_example is not None:
        cause = (
            "strict_mode refuses properties the schema does not declare (the schema allows them)"
        )
        add(("strict", ""), _Group(cause, Direction.SCHEMA_ACCEPTS.value, ["strict_mode"], [],
                                  strict_example, None), strict_example)  # fmt: skip
    for witness in witnesses:
        if witness.direction is not Direction.SCHEMA_ACCEPTS:
            continue
        offset = witness.refusal.offset if witness.refusal else 0
        escape = witness.text[offset : offset + 1] == "\\"
        cause = (
            'the grammar refuses escapes (\\n, \\", \\\\...) in strings the schema accepts'
            if escape
            else "the grammar refuses documents the schema accepts"
        )
        made = _Group(cause, Direction.SCHEMA_ACCEPTS.value, [], [], witness.text,
                      (offset, offset + 1))  # fmt: skip
        add(("refused", cause), made, witness.text)

    for row in rows:
        proof = proofs.by_pointer.get(row.pointer)
        flagged = row.status in (Status.IGNORED, Status.WEAKENED)
        if not flagged or (proof and (proof.witness or proof.not_json)):
            continue
        if any(row.pointer in g.pointers for g in groups.values()):
            continue
        note = f"no witness can be built: {proof.note}" if proof and proof.note else row.detail
        cause = f"xgrammar {row.status.value.replace('ignored', 'ignores')} {row.keyword}"
        add(("note", row.pointer), _Group(cause, Direction.GRAMMAR_ACCEPTS.value, [row.keyword],
                                         [row.pointer], None, None, 0, note), None)  # fmt: skip
    return tuple(g.finding() for g in groups.values())


def _add_over(add: object, over: Over, by_pointer: dict[str, Keyword]) -> None:
    if over.cause.startswith("no type at"):
        return  # told by the typeless finding, with this witness
    names = [_name(p, by_pointer) for p in over.pointers]
    make = _Group(over.cause, Direction.SCHEMA_ACCEPTS.value, names, list(over.pointers),
                  over.witness.text, over.span)  # fmt: skip
    add(("over", over.cause), make, over.witness.text)  # type: ignore[operator]
