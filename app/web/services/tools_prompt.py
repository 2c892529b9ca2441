"""A ``tools`` source's prompt: the chat template's render of a conversation with its tools, the
token count, and the count with and without each option that changes it.

A template may read each tool's ``strict`` flag (vLLM #52741: 411 vs 416 prompt tokens),
``tool_choice`` (``none`` renders without the tools) and reasoning (``enable_thinking``). Every
number is a real render on the model's tokenizer
(:func:`~app.engine.model.chat_templates.option_counts`), never an estimate. The template is the
one the round trip renders with (the source's ``chat_template``, else the model's own, else its
family's shipped one); one that cannot render here (none at all, a pasted one that fails, a
stack's encoder) is named with the reason instead of counts: the compile itself stands.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.doctor.tools_roundtrip import source_template
from app.engine import AnyEngine, GrammarKind, GrammarSpec
from app.engine.grammars.tools.base import ToolsRequest
from app.engine.model.chat_templates import option_counts, render
from app.exceptions import InvalidInput
from app.web.runtime.state import AppState

__all__ = ["DEFAULT_MESSAGES", "tools_prompt", "tools_prompt_answer"]

#: The conversation rendered when none is given (the round trip's).
DEFAULT_MESSAGES: tuple[dict[str, str], ...] = ({"role": "user", "content": "Use the tools."},)


def _variables(request: ToolsRequest) -> dict[str, Any]:
    """What the request tells the template about reasoning (nothing under ``auto``)."""
    if request.reasoning == "auto":
        return {}
    return {"enable_thinking": request.reasoning == "enabled"}


def tools_prompt_answer(
    engine: AnyEngine, spec: GrammarSpec, messages: Sequence[dict[str, str]] = DEFAULT_MESSAGES
) -> dict[str, Any]:
    """The prompt section of a ``tools`` source's compile answer (blocking: renders and
    tokenizes seven times).

    Args:
        engine: the engine the source was compiled on (its build of the source is cached).
        spec: the compiled spec (its ``$model`` parameters already derived).
        messages: the conversation before the assistant's turn.

    Returns:
        ``{"template": {"origin", "source", "licence", "mode"}, "messages": int, "text", "tokens",
        "options": [{"option", "with", "without", "changes"}]}``; instead of ``text``,
        ``tokens`` and ``options``, ``"error": {"message", "pointer"}`` when the template
        cannot render here.
    """
    request = engine.tools.build(spec)[0].request
    answer: dict[str, Any] = {"template": None, "messages": len(messages)}
    chat = [dict(m) for m in messages]
    tools = [dict(tool) for tool in request.tools]
    try:
        template = source_template(engine, request)
        answer["template"] = {k: v for k, v in template.to_dict().items() if k != "text"}
        shown = render(
            template,
            engine.model.tokens,
            chat,
            tools=tools if request.tool_choice != "none" else None,
            **_variables(request),
        )
        counts = option_counts(template, engine.model.tokens, chat, tools)
    except InvalidInput as error:
        answer["error"] = {"message": error.message, "pointer": error.pointer}
        return answer
    options = [count.to_dict() for count in counts]
    return answer | {"text": shown.text, "tokens": shown.tokens, "options": options}


async def tools_prompt(
    state: AppState,
    engine: AnyEngine,
    spec: GrammarSpec,
    messages: Sequence[dict[str, str]] | None = None,
) -> dict[str, Any] | None:
    """:func:`tools_prompt_answer` on the ``parses`` pool (CPU in this process); None for a
    source of another kind."""
    if spec.kind is not GrammarKind.TOOLS:
        return None
    chat = tuple(messages) if messages else DEFAULT_MESSAGES
    return await state.pools.parses.run(tools_prompt_answer, engine, spec, chat)
