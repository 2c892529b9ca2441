"""The template round trip: does the grammar accept what the model was trained to write?

For each tool a minimal valid call is built from its parameters' schema (plus the user's example
calls); the chat template renders the assistant turn that makes it (one call, two parallel
calls, with and without reasoning); the text after the generation prompt is replayed through
the tag the stack builds for the same request. The answer is accepted, or the first
disagreement: its offset, what the template wrote there, what the tag allows, and the cause.
A refusal is the Doctor's finding "the grammar refuses the model's own format" (SGLang #25233:
the tag joined parallel calls with ``\\n\\n`` where the template writes ``\\n``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from app.engine.grammars.reasoning import EndMarker, ReasoningGate, ReasoningMode
from app.engine.grammars.spec import CompileOptions, GrammarKind, GrammarSpec
from app.engine.model.chat_templates import ChatTemplate, render
from app.engine.stepper.replay import replay
from app.exceptions import InvalidInput

__all__ = ["REFUSES_OWN_FORMAT", "RoundTrip", "minimal_value", "round_trip", "turn_text"]

REFUSES_OWN_FORMAT = "the grammar refuses the model's own format"
_REASONING = "Let me call the tool."
_SHOWN = 24


def minimal_value(schema: Any) -> Any:
    """A small value ``schema`` accepts: its const, first enum member or example, else the
    least of its type (required properties only, ``minItems`` items, ``minimum``...)."""
    if not isinstance(schema, dict):
        return {}
    for key in ("const", "default"):
        if key in schema:
            return schema[key]
    if schema.get("enum"):
        return schema["enum"][0]
    if schema.get("examples"):
        return schema["examples"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key):
            return minimal_value(schema[key][0])
    kind = schema.get("type", "object")
    kind = kind[0] if isinstance(kind, list) and kind else kind
    if kind == "object":
        properties = schema.get("properties", {})
        return {
            name: minimal_value(properties.get(name, {})) for name in schema.get("required", [])
        }
    if kind == "array":
        return [minimal_value(schema.get("items", {})) for _ in range(schema.get("minItems", 0))]
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum", -1) + 1)
        return int(low) if kind == "integer" else low
    if kind == "string":
        return "a" * max(1, schema.get("minLength", 1))
    return {"boolean": True, "null": None}.get(kind, {})


def _call(tool: dict[str, Any], arguments: Any = None) -> dict[str, Any]:
    function = tool.get("function", tool)
    value = minimal_value(function.get("parameters", {})) if arguments is None else arguments
    return {"type": "function", "function": {"name": function["name"], "arguments": value}}


@dataclass(frozen=True, slots=True)
class RoundTrip:
    """One rendered turn replayed through the tag.

    Attributes:
        case: what was rendered (``one call get_weather``, ``two parallel calls``...).
        reasoning: whether the turn holds reasoning.
        text: the text after the generation prompt (up to the end-of-turn token).
        accepted: whether the tag accepts all of it.
        offset: the first refused character (code points into ``text``), None when accepted.
        wrote: what the template wrote from there.
        allowed: what the tag allows there (a sample, shortest first).
        cause: the refusal in the tag's terms, when known.
    """

    case: str
    reasoning: bool
    text: str
    accepted: bool
    offset: int | None = None
    wrote: str | None = None
    allowed: tuple[str, ...] = ()
    cause: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "case": self.case,
            "reasoning": self.reasoning,
            "text": self.text,
            "accepted": self.accepted,
            "offset": self.offset,
            "wrote": self.wrote,
            "allowed": list(self.allowed),
            "cause": self.cause,
        }

    def finding(self) -> str | None:
        """The Doctor's finding, in words (None when accepted)."""
        if self.accepted:
            return None
        return (
            f"{REFUSES_OWN_FORMAT}: {self.case}{' with reasoning' if self.reasoning else ''}: "
            f"at offset {self.offset} the template writes {self.wrote!r}; the tag allows "
            f"{', '.join(repr(a) for a in self.allowed[:5]) or 'nothing'}"
            + (f" ({self.cause})" if self.cause else "")
        )


def turn_text(
    template: ChatTemplate,
    engine: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    calls: list[dict[str, Any]],
    *,
    reasoning: bool,
) -> str:
    """The assistant turn making ``calls``, as the template writes it after the generation
    prompt, cut before the end-of-turn token.

    Raises:
        InvalidInput: the template does not render the turn after its own generation prompt.
    """
    tokens = engine.model.tokens
    history = render(
        template, tokens, messages, tools=tools, add_generation_prompt=False,
        enable_thinking=reasoning,
    ).text  # fmt: skip
    prompt = render(template, tokens, messages, tools=tools, enable_thinking=reasoning).text
    turn: dict[str, Any] = {"role": "assistant", "content": "", "tool_calls": calls}
    if reasoning:
        turn["reasoning_content"] = _REASONING
    whole = render(
        template,
        tokens,
        [*messages, turn],
        tools=tools,
        add_generation_prompt=False,
        enable_thinking=reasoning,
    ).text
    if not (whole.startswith(history) and prompt.startswith(history)):
        raise InvalidInput("the template's turn does not continue the conversation before it")
    # What the model writes follows the generation prompt; a template that writes an empty
    # reasoning block only there (reasoning off) shares just the turn's header with it.
    header = os.path.commonprefix([prompt[len(history) :], whole[len(history) :]])
    text = whole[len(history) + len(header) :]
    ends = [text.find(tokens.text(i)) for i in tokens.stop_ids if tokens.text(i)]
    ends = [e for e in ends if e >= 0]
    return text[: min(ends)] if ends else text


def round_trip(
    engine: Any,
    template: ChatTemplate,
    tools: list[dict[str, Any]],
    tag_for: Callable[[bool], tuple[dict[str, Any] | str, str | None]],
    *,
    examples: Sequence[dict[str, Any]] = (),
    messages: list[dict[str, Any]] | None = None,
) -> list[RoundTrip]:
    """Every case rendered and replayed (``tag_for(reasoning)``: the stack's tag for the same
    request with reasoning on or off, and its reasoning parser's end marker; ``examples``:
    ``{"name", "arguments"}`` calls to add). The turn is replayed under the stack's reasoning
    gate: no mask until the end marker (vLLM's reasoning parser), the tag after it."""
    messages = messages or [{"role": "user", "content": "Use the tools."}]
    by_name = {t.get("function", t)["name"]: t for t in tools}
    cases = [(f"one call {name}", [_call(tool)]) for name, tool in by_name.items()]
    cases.append(("two parallel calls", [_call(tools[0]), _call(tools[-1])]))
    for example in examples:
        tool = by_name[example["name"]]
        cases.append((f"example call {example['name']}", [_call(tool, example["arguments"])]))
    out = []
    for reasoning in (False, True):
        tag, end = tag_for(reasoning)
        source = tag if isinstance(tag, str) else json.dumps(tag)
        spec = GrammarSpec(GrammarKind.STRUCTURAL_TAG, source, CompileOptions())
        grammar = engine.compile(spec)
        gate = ReasoningGate(ReasoningMode.NONE)
        if reasoning and end:
            gate = ReasoningGate(ReasoningMode.MASK_AFTER_END, (EndMarker(end),))
        tokens = engine.model.tokens
        for case, calls in cases:
            text = turn_text(template, engine, messages, tools, calls, reasoning=reasoning)
            eos = [tokens.tokenizer.eos_token_id]
            result = replay(grammar, tokens, text=text, token_ids=eos, reasoning=gate)
            out.append(_verdict(case, reasoning, text, result))
    return out


def _verdict(case: str, reasoning: bool, text: str, result: Any) -> RoundTrip:
    if result.accepted:
        return RoundTrip(case, reasoning, text, True)
    rejection = result.rejection
    offset = rejection.offset
    cause = result.refusal.cause if result.refusal is not None else None
    wrote = text[offset : offset + _SHOWN] if offset < len(text) else "the end of the turn"
    return RoundTrip(case, reasoning, text, False, offset, wrote, rejection.expected, cause)
