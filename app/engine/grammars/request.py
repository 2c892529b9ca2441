"""A ``request`` source: an OpenAI Chat Completions body as sent to vLLM, and the ``vllm serve``
flags that matter, turned by a vLLM stack's own code into what that server would mask with.

The source is JSON: ``{"body": {...}, "serve": {"tool_call_parser"?, "reasoning_parser"?,
"structured_outputs_config"?, "tool_strict_level"?, "strict_tool_calling"?}, "chat_template"?}``.
:func:`parse_request` checks its shape (every error placed by JSON pointer); the body itself is
validated by the stack (vLLM's ``ChatCompletionRequest``), whose refusals point into ``/body``.
The stack's runner (``derive`` in ``vllm_runner.py``) renders the prompt with vLLM's chat
renderer, adjusts the request with the server's tool and reasoning parsers, and hands back the
constraint ``to_sampling_params`` would give the engine; :func:`derived_request` names it as a
grammar kind Maskscope compiles.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from app.engine.grammars.structural_tag import json_object, tag_error
from app.engine.stack_pins import ServeFlags
from app.exceptions import GrammarError
from app.vocabulary import GrammarKind

__all__ = [
    "SERVE_FLAGS",
    "DerivedRequest",
    "RequestSource",
    "derived_request",
    "parse_request",
    "serve_flags",
]

#: The ``vllm serve`` flags a request source may set (``--tool-call-parser`` ..., and
#: ``VLLM_ENFORCE_STRICT_TOOL_CALLING`` as ``strict_tool_calling``).
SERVE_FLAGS: dict[str, type] = {
    "tool_call_parser": str,
    "reasoning_parser": str,
    "structured_outputs_config": dict,
    "tool_strict_level": str,
    "strict_tool_calling": bool,
}
_FIELDS = ("body", "serve", "chat_template")


@dataclass(frozen=True)
class RequestSource:
    """A parsed ``request`` source.

    Attributes:
        body: the Chat Completions body, as pasted.
        serve: the serve flags set (names of :data:`SERVE_FLAGS`).
        chat_template: the server's ``--chat-template``, when given.
    """

    body: dict[str, Any]
    serve: dict[str, Any] = field(default_factory=dict)
    chat_template: str | None = None


def parse_request(source: str) -> RequestSource:
    """Parse a ``request`` source.

    Raises:
        GrammarError: not a JSON object, an unknown field or serve flag, or a field of the wrong
            type (with the pointer to it).
    """
    data = json_object(source, "request source")
    for key in data:
        if key not in _FIELDS:
            raise tag_error(
                source, [key], f"unknown field {key!r}; the fields: {', '.join(_FIELDS)}"
            )
    if "body" not in data:
        raise tag_error(source, [], "missing field 'body' (the Chat Completions request)")
    if not isinstance(data["body"], dict):
        raise tag_error(source, ["body"], "body is a JSON object (the Chat Completions request)")
    serve = data.get("serve", {})
    if not isinstance(serve, dict):
        raise tag_error(source, ["serve"], "serve is a JSON object of vllm serve flags")
    for name, value in serve.items():
        if name not in SERVE_FLAGS:
            known = ", ".join(SERVE_FLAGS)
            message = f"unknown serve flag {name!r}; the flags: {known}"
            raise tag_error(source, ["serve", name], message)
        want = SERVE_FLAGS[name]
        if not isinstance(value, want) or (want is not bool and isinstance(value, bool)):
            raise tag_error(source, ["serve", name], f"{name} is a {_type_name(want)}")
    template = data.get("chat_template")
    if template is not None and not isinstance(template, str):
        raise tag_error(source, ["chat_template"], "chat_template is a string (a Jinja template)")
    return RequestSource(data["body"], dict(serve), template)


def _type_name(kind: type) -> str:
    return {str: "string", bool: "boolean", dict: "JSON object"}[kind]


@dataclass(frozen=True)
class DerivedRequest:
    """What a stack made of a request: the grammar its engine would mask with, and the rest.

    Attributes:
        kind: the grammar's kind (a tag, a JSON Schema, a regex, EBNF).
        source: the grammar, as Maskscope compiles it.
        prompt: the prompt vLLM's chat renderer made of the messages and tools.
        prompt_tokens: its length on the request model's tokenizer.
        stack: the stack whose code derived it.
        versions: that stack's versions (vllm, xgrammar, ...).
        reasoning_end: the reasoning parser's end marker, with ``--reasoning-parser``.
        min_tokens: the body's ``min_tokens``.
        stop_token_ids: the body's ``stop_token_ids``.
        stop: the body's ``stop`` strings.
        reasoning_parser: the ``--reasoning-parser`` flag.
        structured_outputs_config: the ``--structured-outputs-config`` flag.
        chat_template_kwargs: what the request sends its parsers (as the stack built them).
    """

    kind: GrammarKind
    source: str
    prompt: str
    prompt_tokens: int
    stack: str
    versions: dict[str, str]
    reasoning_end: str | None = None
    min_tokens: int = 0
    stop_token_ids: tuple[int, ...] = ()
    stop: tuple[str, ...] = ()
    reasoning_parser: str | None = None
    structured_outputs_config: dict[str, Any] = field(default_factory=dict)
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)

    def serve_flags(self, reasoning: str) -> ServeFlags:
        """The flags a replay under the stack is made under: the request's own, with the
        replay's ``reasoning`` setting (``mask_everywhere``: ``enable_in_reasoning``) added."""
        config = dict(self.structured_outputs_config)
        if reasoning == "mask_everywhere" or "enable_in_reasoning" not in config:
            config |= ServeFlags.for_reasoning(reasoning).structured_outputs_config
        return ServeFlags(self.reasoning_parser, config, dict(self.chat_template_kwargs))

    def to_dict(self) -> dict[str, Any]:
        """The compile answer's ``derived`` (the contract's fields, then the stack's)."""
        return {
            "prompt": self.prompt,
            "prompt_tokens": self.prompt_tokens,
            "kind": self.kind.value,
            "source": self.source,
            "reasoning_end": self.reasoning_end,
            "min_tokens": self.min_tokens,
            "stop_token_ids": list(self.stop_token_ids),
            "stop": list(self.stop),
            "stack": self.stack,
            "versions": dict(self.versions),
        }


def serve_flags(request: DerivedRequest | None, reasoning: str) -> ServeFlags:
    """The flags a walk under a stack is made under: a pasted request's own
    (:meth:`DerivedRequest.serve_flags`), else the ``reasoning`` setting's."""
    return request.serve_flags(reasoning) if request else ServeFlags.for_reasoning(reasoning)


def derived_request(
    answer: dict[str, Any],
    stack: str,
    versions: dict[str, str],
    source: RequestSource | None = None,
) -> DerivedRequest:
    """The runner's ``derive`` answer (to ``source``) as a grammar Maskscope compiles.

    Raises:
        GrammarError: nothing constrains the request (``/body``), or the constraint is one
            Maskscope does not compile (``json_object``, a Lark grammar), said so.
    """
    kind, grammar = _grammar(answer.get("constraint"), answer.get("as_grammar"))
    serve = source.serve if source is not None else {}
    return DerivedRequest(
        kind=kind,
        source=grammar,
        prompt=answer["prompt"],
        prompt_tokens=answer["prompt_tokens"],
        stack=stack,
        versions=versions,
        reasoning_end=answer.get("reasoning_end"),
        min_tokens=answer.get("min_tokens") or 0,
        stop_token_ids=tuple(answer.get("stop_token_ids") or ()),
        stop=tuple(answer.get("stop") or ()),
        reasoning_parser=serve.get("reasoning_parser"),
        structured_outputs_config=dict(serve.get("structured_outputs_config") or {}),
        chat_template_kwargs=dict(answer.get("chat_template_kwargs") or {}),
    )


def _grammar(
    constraint: dict[str, Any] | None, as_grammar: dict[str, Any] | None
) -> tuple[GrammarKind, str]:
    if constraint is None:
        raise GrammarError(
            "vLLM constrains nothing in this request: no tools it builds a tag for (under these "
            "serve flags), no response_format and no structured_outputs",
            pointer="/body",
        )
    ((name, value),) = constraint.items()
    if name == "structural_tag":
        tag = value if isinstance(value, str) else json.dumps(value)
        return GrammarKind.STRUCTURAL_TAG, json.dumps(json.loads(tag), indent=2)
    if name == "json":
        schema = json.loads(value) if isinstance(value, str) else value
        return GrammarKind.JSON_SCHEMA, json.dumps(schema, indent=2)
    if name == "regex":
        return GrammarKind.REGEX, str(value)
    if as_grammar is not None and "ebnf" in as_grammar:  # a grammar, or choices as vLLM's EBNF
        return GrammarKind.EBNF, str(as_grammar["ebnf"])
    what = "a Lark grammar" if as_grammar and "lark" in as_grammar else f"a {name} constraint"
    raise GrammarError(
        f"vLLM hands its engine {what}, which Maskscope does not compile; replay it under the "
        "stack, whose own backend masks it",
        pointer="/body",
    )
