"""Each constraint keyword's status: ignored > weakened > warned > enforced, the first that applies.

- *ignored*: xgrammar writes the very same grammar without the keyword (the probe compares them),
  unless the keyword is redundant for xgrammar: a ``type`` its sibling keywords already imply
  (xgrammar infers it from them), or ``additionalProperties: false`` and the like under
  ``strict_mode``, which refuses undeclared properties and items anyway;
- *weakened*: a witness, a document the grammar accepts, breaks the keyword;
- *warned*: xgrammar printed a line about it (the line vanishes when the keyword is removed);
- *enforced*: none of these;
- *unchecked*: the comparison has no answer for this keyword (and no witness): past the count of
  keywords compared, or cut short by load; or the proofs were cut short by load before it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from app.doctor.keywords import Keyword
from app.doctor.proving import Proof, Proofs
from app.doctor.records import Direction, KeywordFinding, Status, Witness
from app.doctor.safety import LOAD_NOTE
from app.engine.grammars.keyword_probe import ProbeResult

__all__ = ["findings"]


#: Sibling keywords that tell xgrammar which JSON type a schema is, with or without ``type``.
_TYPE_OF_KEYWORD = {
    **dict.fromkeys(("properties", "required", "additionalProperties", "patternProperties",
                     "minProperties", "maxProperties", "propertyNames"), "object"),
    **dict.fromkeys(("items", "prefixItems", "minItems", "maxItems", "contains"), "array"),
    **dict.fromkeys(("minLength", "maxLength", "pattern", "format"), "string"),
}  # fmt: skip
_JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string",
               list: "array", dict: "object", type(None): "null"}  # fmt: skip
#: Keywords that refuse undeclared properties or items, as ``strict_mode`` does anyway.
_CLOSING = ("additionalProperties", "unevaluatedProperties", "additionalItems",
            "unevaluatedItems", "items")  # fmt: skip


def _implied_types(node: dict[str, Any]) -> set[str]:
    """The types the keywords beside ``type`` confine a schema to (empty: none)."""
    values = [node["const"]] if "const" in node else []
    values += node["enum"] if isinstance(node.get("enum"), list) else []
    found = {_JSON_TYPES.get(type(v), "") for v in values}
    found |= {_TYPE_OF_KEYWORD[k] for k in node if k in _TYPE_OF_KEYWORD}
    return found - {""}


def redundant(keyword: Keyword, *, strict_mode: bool) -> str | None:
    """Why a keyword xgrammar converts away changes nothing after all, or None."""
    if keyword.keyword == "type":
        declared = {keyword.value} if isinstance(keyword.value, str) else set(keyword.value)
        implied = _implied_types(keyword.node)
        if implied and implied <= declared | ({"number"} if "integer" in implied else set()):
            return f"its sibling keywords already make it {' or '.join(sorted(implied))}"
    if strict_mode and keyword.keyword in _CLOSING and keyword.value is False:
        return "strict_mode refuses undeclared properties and items anyway"
    return None


def _witnessed(witnesses: Sequence[Witness]) -> dict[str, str]:
    """Keyword pointer -> the first validator message that blames it."""
    blamed: dict[str, str] = {}
    for witness in witnesses:
        if witness.direction is not Direction.GRAMMAR_ACCEPTS:
            continue
        for error in witness.errors:
            if error.pointer and error.pointer not in blamed:
                blamed[error.pointer] = f"{error.message} (at {error.path} in {witness.text!r})"
    return blamed


def _warned_deepest(probe: ProbeResult | None) -> dict[str, list[str]]:
    """Keyword pointer -> the warnings it causes. Removing a keyword also removes the warnings
    of the keywords inside it, so a warning goes to the deepest keyword that clears it."""
    clearing: dict[str, list[str]] = {}
    for found in probe.probes if probe else ():
        for line in found.warnings:
            clearing.setdefault(line, []).append(found.pointer)
    out: dict[str, list[str]] = {}
    for line, pointers in clearing.items():
        for pointer in pointers:
            if not any(other.startswith(pointer + "/") for other in pointers):
                out.setdefault(pointer, []).append(line)
    return out


def findings(
    keywords: Sequence[Keyword],
    probe: ProbeResult | None,
    witnesses: Sequence[Witness],
    *,
    line_of: Callable[[str], int | None],
    strict_mode: bool,
    unchecked_formats: Sequence[str] = (),
    proofs: Proofs | None = None,
    unprobed: str = "not compared: the time bound was reached first",
) -> tuple[KeywordFinding, ...]:
    """The status of every keyword.

    Args:
        keywords: the schema's constraint keywords.
        probe: the grammar compared with and without each keyword (None: not compared at all).
        witnesses: the search's witnesses.
        line_of: the editor line of a keyword pointer (None when it has none).
        strict_mode: the option the grammar was compiled with.
        unchecked_formats: formats jsonschema cannot check (no witness can prove them ignored).
        proofs: the documents built against each keyword (``enforced`` needs the grammar to
            refuse them; without proofs it means the grammar changes without the keyword).
        unprobed: the detail of a keyword the comparison has no answer for (why not).
    """
    probes = {p.pointer: p for p in probe.probes} if probe else {}
    built = proofs.by_pointer if proofs else {}
    blamed = _witnessed(witnesses)
    for pointer, made in built.items():
        if made.witness is not None:
            blamed[pointer] = (
                f"{_first_message(made.witness, pointer)} (in {made.witness.text!r},"
                " a document built to break it)"
            )
        elif made.not_json is not None:
            blamed[pointer] = (
                f"its strings accept a raw control character, which JSON forbids"
                f" ({made.not_json!r} is not JSON)"
            )
    warned = _warned_deepest(probe)
    out: list[KeywordFinding] = []
    for keyword in keywords:
        found = probes.get(keyword.pointer)
        reason = redundant(keyword, strict_mode=strict_mode)
        if found is not None and found.identical and reason and keyword.pointer not in blamed:
            status, detail = Status.ENFORCED, f"the grammar is the same without it: {reason}"
        elif found is not None and found.identical:
            status, detail = Status.IGNORED, "xgrammar writes the same grammar without it"
            if keyword.pointer in blamed:
                detail += f"; a document the grammar accepts breaks it: {blamed[keyword.pointer]}"
        elif keyword.pointer in blamed:
            status = Status.WEAKENED
            detail = f"a document the grammar accepts breaks it: {blamed[keyword.pointer]}"
        elif found is None:
            status, detail = Status.UNCHECKED, unprobed
        elif proofs is not None and proofs.by_load and keyword.pointer not in built:
            status, detail = Status.UNCHECKED, f"not proven: {LOAD_NOTE}"
        elif warned.get(keyword.pointer):
            status, detail = Status.WARNED, "; ".join(warned[keyword.pointer])
        else:
            status, detail = Status.ENFORCED, _enforced(built.get(keyword.pointer))
        if keyword.keyword == "format" and keyword.value in unchecked_formats:
            detail += f" (jsonschema cannot check format {keyword.value!r}: no witness for it)"
        proof = built.get(keyword.pointer)
        witness = proof.witness.text if proof and proof.witness else None
        span = proof.span if proof and proof.witness else None
        if proof and witness is None and proof.not_json:
            witness, span = proof.not_json, proof.not_json_span
        note = f"no witness can be built: {proof.note}" if proof and proof.note else None
        out.append(
            KeywordFinding(
                keyword.pointer,
                keyword.keyword,
                line_of(keyword.pointer),
                status,
                detail,
                witness,
                span,
                note,
            )
        )
    return tuple(out)


def _first_message(witness: Witness, pointer: str) -> str:
    found = next(
        (e for e in witness.errors if e.pointer and (e.pointer + "/").startswith(pointer + "/")),
        None,
    )
    return f"{found.message} at {found.path}" if found else "the schema rejects it"


def _enforced(proof: Proof | None) -> str:
    """Why a keyword counts as enforced: what the built documents showed."""
    if proof is None:
        return "the grammar changes without it"
    if proof.refused:
        plural = "s" if proof.refused > 1 else ""
        return f"the grammar refuses the {proof.refused} document{plural} built to break it"
    if proof.note:
        return f"the grammar changes without it; no witness can be built: {proof.note}"
    return "the grammar changes without it; its subschemas are examined keyword by keyword"
