"""The template round trip: does the grammar accept what the model was trained to write?

For each tool a minimal valid call is built from its parameters' schema (plus the user's example
calls); the chat template renders the assistant turn that makes it (one call, two parallel
calls, with and without reasoning); the text after the generation prompt is replayed through
the tag the stack builds for the same request. The answer is accepted, or the first
disagreement: its offset, what the template wrote there, what the tag allows, and the cause.
A refusal is the Doctor's finding "the grammar refuses the model's own format" (SGLang #25233:
the tag joined parallel calls with ``\\n\\n`` where the template writes ``\\n``).

Under a serving stack (``stack``), the stack's own code does both halves: a template that is
the stack's prompt encoder (DeepSeek V4's) renders in its runner, and each turn is walked by
:func:`~app.engine.stacks.replay.stack_replay` (the release's backend, its reasoning parser's
end detection and its scheduler's rows, under the request's serve flags). Without one (the
``maskscope`` stack) the tag is compiled by Maskscope's xgrammar and walked under its
:class:`~app.engine.grammars.reasoning.ReasoningGate`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.engine.grammars.reasoning import EndMarker, ReasoningGate, ReasoningMode
from app.engine.grammars.spec import CompileOptions, GrammarKind, GrammarSpec
from app.engine.grammars.tools.base import ToolsRequest
from app.engine.model.chat_templates import ChatTemplate, in_stack, render
from app.engine.stack_pins import ServeFlags
from app.engine.stepper.replay import replay
from app.exceptions import InvalidInput

if TYPE_CHECKING:
    from app.engine.grammars.tools.vllm_builder import VllmBuilder

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
        token_index: the first refused token, by its index in the replayed ids (the text's
            tokens, then the end-of-turn token), None when accepted.
    """

    case: str
    reasoning: bool
    text: str
    accepted: bool
    offset: int | None = None
    wrote: str | None = None
    allowed: tuple[str, ...] = ()
    cause: str | None = None
    token_index: int | None = None

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
            "token_index": self.token_index,
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
    return _turn(template, engine, messages, tools, calls, reasoning=reasoning)[1]


def _turn(
    template: ChatTemplate,
    engine: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    calls: list[dict[str, Any]],
    *,
    reasoning: bool,
) -> tuple[str, str]:
    """What precedes the turn (the conversation up to its generation prompt, as the whole
    conversation renders it) and :func:`turn_text`."""
    tokens = engine.model.tokens
    history = render(
        template, tokens, messages, tools=tools, add_generation_prompt=False,
        enable_thinking=reasoning,
    ).text  # fmt: skip
    prompt = render(template, tokens, messages, tools=tools, enable_thinking=reasoning).text
    turn: dict[str, Any] = {"role": "assistant", "content": "", "tool_calls": calls}
    if reasoning:
        # Jinja templates read reasoning_content; vLLM's renderers and encoders, reasoning.
        turn["reasoning_content"] = turn["reasoning"] = _REASONING
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
    cut = len(history) + len(header)
    text = whole[cut:]
    ends = [text.find(tokens.text(i)) for i in tokens.stop_ids if tokens.text(i)]
    ends = [e for e in ends if e >= 0]
    return whole[:cut], text[: min(ends)] if ends else text


def round_trip(
    engine: Any,
    template: ChatTemplate,
    tools: list[dict[str, Any]],
    tag_for: Callable[[bool], tuple[dict[str, Any] | str, str | None]],
    *,
    examples: Sequence[dict[str, Any]] = (),
    messages: list[dict[str, Any]] | None = None,
    stack: VllmBuilder | None = None,
    tokenizer: str | None = None,
    request_for: Callable[[bool], ToolsRequest] | None = None,
    serve: ServeFlags | None = None,
) -> list[RoundTrip]:
    """Every case rendered and replayed.

    Args:
        engine: the model (its tokenizer renders the counts and tokenizes the turns).
        template: the chat template (a stack's encoder renders in ``stack``).
        tools: OpenAI Chat Completions tools.
        tag_for: the stack's tag for the same request with reasoning on or off, and its
            reasoning parser's end marker.
        examples: ``{"name", "arguments"}`` calls to add.
        messages: the conversation before the turn (default: one user message).
        stack: the serving stack that walks each turn with its own code (None: Maskscope's
            xgrammar walks it under the reasoning gate: no mask until the end marker, the tag
            after it, as vLLM's reasoning parser does).
        tokenizer: the tokenizer directory the stack loads (default: the engine's).
        request_for: the request with reasoning on or off: under ``stack``, the stack derives
            its constraint from it again (its tag, strict setting and reasoning parser), as its
            server does; without it, the tag ``tag_for`` gives is walked as a structural tag.
        serve: the serve flags under ``stack`` (``--structured-outputs-config``; its
            ``reasoning_parser`` when there is no ``request_for``).

    Raises:
        InvalidInput: the template does not render the turn, or the stack has no encoder for
            it.
        GrammarError: the stack refuses the request, or is unavailable.
    """
    messages = messages or [{"role": "user", "content": "Use the tools."}]
    if stack is not None:
        tokenizer = tokenizer or engine.tools.tokenizer
        template = in_stack(template, stack, tokenizer)
    cases = _cases(tools, examples)
    out = []
    for reasoning in (False, True):
        if stack is None:
            walk = _local_walk(engine, tag_for(reasoning), reasoning)
        else:
            assert tokenizer is not None  # the engine's, when none was given
            request = request_for(reasoning) if request_for is not None else None
            walk = _stack_walk(engine, stack, tokenizer, tag_for, request, serve, reasoning)
        for case, calls in cases:
            prompt, text = _turn(template, engine, messages, tools, calls, reasoning=reasoning)
            out.append(_verdict(case, reasoning, text, walk(prompt, text)))
    return out


def _cases(
    tools: list[dict[str, Any]], examples: Sequence[dict[str, Any]]
) -> list[tuple[str, list[dict[str, Any]]]]:
    by_name = {t.get("function", t)["name"]: t for t in tools}
    cases = [(f"one call {name}", [_call(tool)]) for name, tool in by_name.items()]
    cases.append(("two parallel calls", [_call(tools[0]), _call(tools[-1])]))
    for example in examples:
        tool = by_name[example["name"]]
        cases.append((f"example call {example['name']}", [_call(tool, example["arguments"])]))
    return cases


#: Walks one turn (the text before it, the turn's text) to a replay result.
_Walk = Callable[[str, str], Any]


def _local_walk(
    engine: Any, built: tuple[dict[str, Any] | str, str | None], reasoning: bool
) -> _Walk:
    """The tag compiled by Maskscope's xgrammar, walked under its reasoning gate."""
    tag, end = built
    source = tag if isinstance(tag, str) else json.dumps(tag)
    grammar = engine.compile(GrammarSpec(GrammarKind.STRUCTURAL_TAG, source, CompileOptions()))
    gate = ReasoningGate(ReasoningMode.NONE)
    if reasoning and end:
        gate = ReasoningGate(ReasoningMode.MASK_AFTER_END, (EndMarker(end),))
    tokens = engine.model.tokens
    eos = [tokens.tokenizer.eos_token_id]
    return lambda _prompt, text: replay(grammar, tokens, text=text, token_ids=eos, reasoning=gate)


def _stack_walk(
    engine: Any,
    stack: VllmBuilder,
    tokenizer: str,
    tag_for: Callable[[bool], tuple[dict[str, Any] | str, str | None]],
    request: ToolsRequest | None,
    serve: ServeFlags | None,
    reasoning: bool,
) -> _Walk:
    """The turn walked by the stack's own code: the request's tools source (or the tag) as
    the stack derives it, the prompt's ids (a prompt that closed the reasoning starts the
    grammar at once), the turn's text, then the end-of-turn token."""
    from app.engine.stacks.replay import stack_replay

    if request is not None:
        spec = GrammarSpec(GrammarKind.TOOLS, _tools_source(request), CompileOptions())
    else:
        tag = tag_for(reasoning)[0]
        source = tag if isinstance(tag, str) else json.dumps(tag)
        spec = GrammarSpec(GrammarKind.STRUCTURAL_TAG, source, CompileOptions())
    grammar = engine.compile(spec)
    tokens = engine.model.tokens
    eos = [tokens.tokenizer.eos_token_id]

    def walk(prompt: str, text: str) -> Any:
        return stack_replay(
            stack, grammar, tokens, tokenizer=tokenizer, text=text, token_ids=eos,
            serve=serve, prompt_ids=tokens.encode(prompt),
        )  # fmt: skip

    return walk


def _tools_source(request: ToolsRequest) -> str:
    """``request`` as a ``tools`` source (the fields it sets)."""
    fields = dataclasses.asdict(request)
    fields["tools"] = list(request.tools)
    return json.dumps({k: v for k, v in fields.items() if v is not None})


def _verdict(case: str, reasoning: bool, text: str, result: Any) -> RoundTrip:
    if result.accepted:
        return RoundTrip(case, reasoning, text, True)
    rejection = result.rejection
    offset = rejection.offset
    cause = result.refusal.cause if result.refusal is not None else None
    wrote = text[offset : offset + _SHOWN] if offset < len(text) else "the end of the turn"
    return RoundTrip(
        case, reasoning, text, False, offset, wrote, rejection.expected, cause,
        rejection.token_index,
    )  # fmt: skip
