"""A ``tools`` source as the serving stacks take it: the chat request's fields and server flags.

Read from vLLM 0.32.0: the tool parser exists, so a tag is built at all, only when the server
runs with ``--enable-auto-tool-choice`` and ``--tool-call-parser`` (``ParserManager.
get_tool_parser`` in ``vllm/parser/parser_manager.py``), whatever the ``tool_choice``;
``--tool-strict-level`` takes ``auto``, ``function`` or ``parameter``
(``entrypoints/launchers/cli_args.py``); ``VLLM_ENFORCE_STRICT_TOOL_CALLING`` is true by default
and false builds no tag (``vllm/envs.py``, ``tool_parsers/abstract_tool_parser.py``); the tag
is built with ``reasoning=False`` whatever the request (``_apply_structural_tag`` in
``parser/abstract_parser.py``), and with a ``--reasoning-parser`` the mask waits for the
reasoning's end unless ``structured_outputs_config.enable_in_reasoning`` is true.
SGLang 0.5.23 (the wheel's ``sglang/srt/function_call/``): the parsers whose detector builds an
xgrammar builtin tag (``get_structural_tag_name``), by that builtin's key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.engine.grammars.tools.base import ToolsRequest
from app.export.options import SGLANG_VERSION, VLLM_FLAG, VLLM_VERSION
from app.export.request import ToolsExport

__all__ = [
    "SGLANG_PARSERS",
    "VLLM_STRICT_ENV",
    "Serve",
    "sglang_parser",
    "tools_export",
    "tools_fields",
    "vllm_serve",
]

VLLM_STRICT_ENV = "VLLM_ENFORCE_STRICT_TOOL_CALLING"

#: SGLang 0.5.23's ``--tool-call-parser`` names by the xgrammar builtin their detector's
#: ``get_structural_tag_name`` returns (``FunctionCallParser.ToolCallParserEnum``).
SGLANG_PARSERS: dict[str, tuple[str, ...]] = {
    "deepseek_v3_2": ("deepseekv32",),
    "deepseek_v4": ("deepseekv4",),
    "deepseek_v4_1": ("deepseekv41",),
    "glm_4_7": ("glm47", "iquest_q1"),
    "harmony": ("gpt-oss",),
    "kimi": ("kimi_k2",),
    "qwen_3_coder": ("qwen3_coder", "step3p5", "nanbeige"),
}


@dataclass(frozen=True)
class Serve:
    """How to start a server for a tools request.

    Attributes:
        env: environment variables to set, ``(name, value)``.
        flags: the command-line words after the model (each flag and its value apart).
        notes: why each is there, and what the server does that Maskscope did not.
        missing: what the server cannot reproduce, one sentence each.
    """

    env: tuple[tuple[str, str], ...]
    flags: tuple[str, ...]
    notes: tuple[str, ...]
    missing: tuple[str, ...] = ()


def tools_fields(tools: ToolsExport) -> dict[str, Any]:
    """The Chat Completions fields of the request: ``tools``, ``tool_choice``,
    ``parallel_tool_calls`` and, when the source has one, ``response_format``."""
    request = tools.request
    fields: dict[str, Any] = {
        "tools": list(request.tools),
        "tool_choice": request.tool_choice,
        "parallel_tool_calls": request.parallel_tool_calls,
    }
    if request.response_format is not None:
        fields["response_format"] = request.response_format
    return fields


def _versions_note(tools: ToolsExport, masking_xgrammar: str) -> list[str]:
    built_with = tools.builder_versions.get("xgrammar")
    if built_with is None or built_with == masking_xgrammar:
        return []
    return [
        f"vLLM compiles its tag with its own xgrammar {built_with}; Maskscope masked with "
        f"xgrammar {masking_xgrammar}."
    ]


def vllm_serve(tools: ToolsExport, masking_xgrammar: str = "") -> Serve:
    """The ``vllm serve`` flags and environment under which vLLM builds the tag Maskscope
    showed (only those that differ from vLLM's defaults, and the two it always needs).

    Args:
        masking_xgrammar: the version of the xgrammar that masked in Maskscope, to say when
            vLLM's differs.
    """
    request = tools.request
    flags = ["--enable-auto-tool-choice", "--tool-call-parser", request.format]
    notes = [
        f"vLLM {VLLM_VERSION} makes the tool parser, and so builds a tag, only when started "
        "with --enable-auto-tool-choice and --tool-call-parser, whatever the tool_choice."
    ]
    missing: list[str] = []
    if request.strict_level not in (None, "auto"):
        flags += ["--tool-strict-level", str(request.strict_level)]
    env: list[tuple[str, str]] = []
    if request.strict_tool_calling is False:
        env.append((VLLM_STRICT_ENV, "0"))
        notes.append(f"{VLLM_STRICT_ENV}=0: vLLM builds no structural tag for tools.")
    if request.reasoning_parser:
        flags += ["--reasoning-parser", request.reasoning_parser]
    stack = tools.stack_reasoning
    if request.reasoning_parser and stack in ("none", "mask_everywhere"):
        flags += [f"{VLLM_FLAG}.enable_in_reasoning", "true"]
        notes.append(
            "enable_in_reasoning true: the mask applies from the first token, as in Maskscope "
            f"(reasoning: {stack}); vLLM's default waits for the reasoning's end."
        )
    elif stack == "mask_after_end" and not request.reasoning_parser:
        missing.append(
            "reasoning: mask_after_end: vLLM waits for the reasoning's end only with a "
            "--reasoning-parser, and the source names none, so vLLM masks from the first token"
        )
    if request.reasoning != "disabled":
        notes.append(
            f"vLLM builds the tag with reasoning=False whatever the request; Maskscope's "
            f"builder was told reasoning: {request.reasoning}."
        )
    if tools.tag is None:
        why = f" ({tools.reason})" if tools.reason else ""
        notes.append(f"vLLM builds no tag for this request either{why}: no call is constrained.")
    notes += _versions_note(tools, masking_xgrammar)
    return Serve(tuple(env), tuple(flags), tuple(notes), tuple(missing))


def sglang_parser(tools: ToolsExport) -> tuple[str | None, str]:
    """SGLang's ``--tool-call-parser`` for the source (None when none is known) and a note."""
    request = tools.request
    names = SGLANG_PARSERS.get(request.format) if request.builder == "xgrammar" else None
    if not names:
        kind = "xgrammar key" if request.builder == "xgrammar" else "vLLM parser name"
        return None, (
            f"the {kind} {request.format!r} names no SGLang {SGLANG_VERSION} tool-call parser "
            "that builds the same xgrammar tag: this SGLang request sends the tag Maskscope "
            "built, raw, and SGLang parses no tool call out of the text"
        )
    others = f" (also {', '.join(names[1:])})" if len(names) > 1 else ""
    return names[0], (
        f"SGLang {SGLANG_VERSION}'s --tool-call-parser {names[0]}{others} builds xgrammar's "
        f"{request.format} tag, but only when it decides to constrain: under tool_choice auto, "
        "only if a tool says strict (or SGLANG_TOOL_STRICT_LEVEL is 1 or more), and with its "
        "own reasoning (thinking) setting; the sglang target sends the exact tag raw."
    )


def tools_export(
    source: dict[str, Any], built: Any = None, *, stack_reasoning: str | None = None
) -> ToolsExport:
    """The export's view of a ``tools`` source (already validated by the compile).

    Args:
        source: the source's JSON, each ``{"$model": ...}`` parameters already replaced by the
            JSON Schema the sandbox derived.
        built: the compile's :class:`app.engine.grammars.tools.base.ToolsBuild` (``result.tools``),
        or
            None when it is not known.
        stack_reasoning: the session's ``reasoning`` setting, if it names one.
    """
    request = ToolsRequest(
        builder=source["builder"],
        format=source["format"],
        tools=tuple(source.get("tools") or ()),
        tool_choice=source.get("tool_choice", "auto"),
        reasoning=source.get("reasoning", "auto"),
        parallel_tool_calls=source.get("parallel_tool_calls", True),
        strict_level=source.get("strict_level"),
        reasoning_parser=source.get("reasoning_parser"),
        response_format=source.get("response_format"),
        strict_tool_calling=source.get("strict_tool_calling"),
    )
    tag = getattr(built, "tag", None)
    reason = getattr(built, "reason", None)
    versions = dict(getattr(built, "builder_versions", None) or {})
    return ToolsExport(request, tag, reason, stack_reasoning, versions)
