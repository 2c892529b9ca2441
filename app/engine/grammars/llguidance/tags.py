"""Structural tags for llguidance, written as vLLM 0.32.0's guidance backend writes them.

vLLM's ``serialize_guidance_grammar`` (``vllm/v1/structured_output/backend_guidance.py``) takes
only the legacy ``{"structures", "triggers"}`` form: each structure becomes an
``llguidance.StructTag`` whose trigger is the first trigger its ``begin`` starts with, whose
grammar is the structure's schema serialized by ``grammar_from_json_schema`` (whitespace
flexible: the server's ``disable_any_whitespace`` is off by default), and the list becomes one
grammar with ``StructTag.to_grammar`` (``assume_special`` on: a trigger written ``<...>`` is a
special token, by name or as a token id ``<[id]>``). The same steps run here, so the mask is the
one that backend applies, including what it gets wrong: ``StructTag`` writes an already
serialized grammar after ``%json``, where llguidance reads it as a JSON Schema whose only keys
are ``grammars`` and ``max_tokens``, so the arguments are any JSON (the warning says so).
A tag in xgrammar's current form has no llguidance equivalent there: it is refused.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import llguidance

from app.engine.grammars.structural_tag import parse_tag, tag_error

__all__ = ["ARGUMENTS_UNCHECKED", "TagGrammar", "special_token", "tag_grammar"]

#: The whitespace vLLM's guidance backend compiles a structure's schema with (its default).
WHITESPACE_FLEXIBLE = True

#: The warning every llguidance tag carries: what vLLM's way of building it leaves unchecked.
ARGUMENTS_UNCHECKED = (
    "the arguments are any JSON, not the structure's schema: vLLM 0.32.0's guidance backend "
    "hands llguidance.StructTag each schema already serialized as an llguidance grammar, which "
    "StructTag writes after %json, where llguidance reads it as a JSON Schema whose only keys "
    "are grammars and max_tokens (xgrammar applies the schema)"
)

_TOKEN_ID = re.compile(r"<\[(\d+)\]>")


@dataclass(frozen=True)
class TagGrammar:
    """A legacy structural tag as llguidance takes it.

    Attributes:
        grammar: the Lark grammar ``StructTag.to_grammar`` wrote.
        warnings: what llguidance does with this tag that a reader of the tag would not expect.
    """

    grammar: str
    warnings: tuple[str, ...]


def special_token(tokenizer: llguidance.LLTokenizer, text: str) -> int | None:
    """The special token ``text`` names (its spelling, or ``<[id]>``), or None."""
    if match := _TOKEN_ID.fullmatch(text):
        token = int(match[1])
        return token if token < tokenizer.vocab_size else None
    ids = tokenizer.tokenize_str(text, parse_special=True)
    return ids[0] if len(ids) == 1 and tokenizer.is_special_token(ids[0]) else None


def tag_grammar(source: str, tokenizer: llguidance.LLTokenizer) -> TagGrammar:
    """The grammar vLLM's guidance backend builds for the structural tag ``source``.

    Raises:
        GrammarError: not a valid tag (pointed to), a tag in xgrammar's current form, a
            structure whose ``begin`` starts with no trigger, an empty trigger, a trigger
            written like a special token that the tokenizer does not have, or a schema
            llguidance refuses.
    """
    parsed = parse_tag(source)
    data: dict[str, Any] = json.loads(source)
    if not parsed.legacy:
        raise tag_error(
            source,
            ["format"] if "format" in data else [],
            "llguidance cannot mask this structural tag: it takes only the legacy "
            '{"structures", "triggers"} form, as vLLM 0.32.0\'s guidance backend does (it reads '
            "the triggers and each structure's begin, schema and end into llguidance.StructTag); "
            'xgrammar\'s {"type": "structural_tag", "format": ...} form has no llguidance '
            "equivalent: mask it with xgrammar",
        )
    triggers: list[str] = data["triggers"]
    warnings = [ARGUMENTS_UNCHECKED]
    for index, trigger in enumerate(triggers):
        warnings += _trigger_notes(source, tokenizer, index, trigger)
    tags = [
        _struct_tag(source, tokenizer, index, structure, triggers, warnings)
        for index, structure in enumerate(data["structures"])
    ]
    if not tags:  # vLLM's own message
        raise tag_error(source, ["structures"], "No structural tags found in the grammar spec.")
    return TagGrammar(llguidance.StructTag.to_grammar(tags), tuple(dict.fromkeys(warnings)))


def _trigger_notes(
    source: str, tokenizer: llguidance.LLTokenizer, index: int, trigger: str
) -> list[str]:
    if not trigger:  # StructTag asserts, which vLLM 0.32.0 does not catch (its answer is a 500)
        raise tag_error(
            source, ["triggers", index], "an empty trigger: llguidance.StructTag refuses it"
        )
    if not (trigger.startswith("<") and trigger.endswith(">")):
        return []
    token = special_token(tokenizer, trigger)
    if token is None:
        raise tag_error(
            source,
            ["triggers", index],
            f"the trigger {trigger!r} is written like a special token (llguidance.StructTag "
            "reads a trigger in <...> as one, as vLLM's guidance backend lets it), and this "
            "tokenizer has no special token spelled so: write the token's id as <[id]>, or a "
            "trigger that does not both open with < and close with >",
        )
    return [
        f"the trigger {trigger!r} is special token {token} (<[{token}]>): llguidance matches "
        "that token only, never the same text spelled in other tokens"
    ]


def _struct_tag(
    source: str,
    tokenizer: llguidance.LLTokenizer,
    index: int,
    structure: dict[str, Any],
    triggers: list[str],
    warnings: list[str],
) -> llguidance.StructTag:
    begin, end = structure["begin"], structure["end"]
    trigger = next((t for t in triggers if begin.startswith(t)), None)
    if trigger is None:  # vLLM's own message
        message = f"Trigger {begin} not found in triggers {triggers}"
        raise tag_error(source, ["structures", index, "begin"], message)
    for field, text in (("begin", begin[len(trigger) :]), ("end", end)):
        warnings += _literal_notes(tokenizer, field, text)
    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(
            structure["schema"], defaults={"whitespace_flexible": WHITESPACE_FLEXIBLE}
        )
    except ValueError as error:
        raise tag_error(source, ["structures", index, "schema"], f"llguidance: {error}") from None
    return llguidance.StructTag(trigger=trigger, begin=begin, grammar=grammar, end=end)


def _literal_notes(tokenizer: llguidance.LLTokenizer, field: str, text: str) -> list[str]:
    """A quoted string in the grammar holding a special token's text: llguidance matches the
    text, so the special token itself is refused there."""
    ids = tokenizer.tokenize_str(text, parse_special=True) if text else []
    return [
        f"the {field} {text!r} holds the text of special token {token} (<[{token}]>): "
        "llguidance matches it as text, so that token is refused there"
        for token in ids
        if tokenizer.is_special_token(token)
    ]
