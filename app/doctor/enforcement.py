"""Each constraint keyword's status: ignored > weakened > warned > enforced, the first that applies.

- *ignored*: xgrammar writes the very same grammar without the keyword (the probe compares them),
  unless the keyword is redundant for xgrammar: a ``type`` its sibling keywords already imply
  (xgrammar infers it from them), or ``additionalProperties: false`` and the like under
  ``strict_mode``, which refuses undeclared properties and items anyway;
- *weakened*: a witness, a document the grammar accepts, breaks the keyword;
- *warned*: xgrammar printed a line about it (the line vanishes when the keyword is removed);
- *enforced*: none of these;
- *unchecked*: the time bound stopped the comparison before this keyword (and no witness).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from app.doctor.keywords import Keyword
from app.doctor.records import Direction, KeywordFinding, Status, Witness
from app.engine.keyword_probe import ProbeResult

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
) -> tuple[KeywordFinding, ...]:
    """The status of every keyword.

    Args:
        keywords: the schema's constraint keywords.
        probe: the grammar compared with and without each keyword (None: not compared at all).
        witnesses: the search's witnesses.
        line_of: the editor line of a keyword pointer (None when it has none).
        strict_mode: the option the grammar was compiled with.
        unchecked_formats: formats jsonschema cannot check (no witness can prove them ignored).
    """
    probes = {p.pointer: p for p in probe.probes} if probe else {}
    blamed = _witnessed(witnesses)
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
            status, detail = Status.UNCHECKED, "not compared: the time bound was reached first"
        elif warned.get(keyword.pointer):
            status, detail = Status.WARNED, "; ".join(warned[keyword.pointer])
        else:
            status, detail = Status.ENFORCED, "the grammar changes without it"
        if keyword.keyword == "format" and keyword.value in unchecked_formats:
            detail += f" (jsonschema cannot check format {keyword.value!r}: no witness for it)"
        out.append(
            KeywordFinding(
                keyword.pointer, keyword.keyword, line_of(keyword.pointer), status, detail
            )
        )
    return tuple(out)
