"""The one setting to try after a replay, as the page's pickers name it.

The setting is derived from what the engine and the stack report, never read from a message:
the refused token's spelling against the end markers of vLLM's reasoning parsers (its registry,
read in its runner) or of xgrammar's format, the tools source's fields, the tag the builder
built (or that it built none), and the presets that take refused whitespace.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.engine.grammars.tools.base import ToolsBuild, ToolsRequest
from app.vocabulary import Preset

__all__ = ["Setting", "setting_to_try"]


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting to try, as the page's pickers name it.

    Attributes:
        field: what to change: a tools source's field (``reasoning_parser``, ``strict_level``,
            ``strict_tool_calling``, ``reasoning``, ``strict`` of ``tool``) or the page's
            ``stack_reasoning`` or ``preset``.
        value: the value to set it to.
        text: the setting in words ("set reasoning_parser to qwen3").
        why: what the engine or the stack reported that names it.
        tool: the tool whose ``strict`` it is, for ``strict``.
    """

    field: str
    value: str | bool
    text: str
    why: str
    tool: str | None = None


def _closest(names: Sequence[str], model: str) -> str:
    """Of parsers that all fit, the one whose name shares the longest start with one of the
    model's names (``qwen3`` for ``qwen3.6``), then the first by name."""
    words = model.lower().split()

    def shared(name: str) -> int:
        return max((len(os.path.commonprefix([name.lower(), w])) for w in words), default=0)

    return sorted(names, key=lambda name: (-shared(name), name))[0]


def _reasoning_setting(
    refused: Sequence[str],
    tools: ToolsRequest,
    build: ToolsBuild | None,
    *,
    reasoning: str,
    parsers: Sequence[Mapping[str, Any]],
    format_end: str | None,
    model: str,
) -> Setting | None:
    """A reasoning end marker refused, or coming after the refused token: the model was
    reasoning, and the setup does not know of it."""
    if tools.builder == "vllm":
        ends = {str(p["name"]): p.get("reasoning_end") for p in parsers}
        marker = next((t for t in refused if t in ends.values()), None)
        if tools.reasoning_parser is None and marker is not None:
            ending = [name for name, end in ends.items() if end == marker]
            name = _closest(ending, model)
            others = [n for n in ending if n != name]
            also = f" (as do {', '.join(others[:4])}{'…' if len(others) > 4 else ''})"
            return Setting(
                "reasoning_parser",
                name,
                f"set reasoning_parser to {name}",
                f"{marker!r} ends the reasoning of vLLM's {name} reasoning parser"
                f"{also if others else ''}; with no --reasoning-parser the server masks from "
                "token 0, the reasoning included",
            )
        end = build.reasoning_end if build is not None else None
        if end is not None and end in refused and reasoning == "none":
            return Setting(
                "stack_reasoning",
                "mask_after_end",
                "set stack reasoning to mask_after_end",
                f"vLLM's {tools.reasoning_parser} reasoning parser ends the reasoning at "
                f"{end!r}; the server masks nothing before it (its default, "
                "enable_in_reasoning false)",
            )
        return None
    if format_end is not None and format_end in refused and tools.reasoning != "enabled":
        return Setting(
            "reasoning",
            "enabled",
            "set reasoning to enabled",
            f"xgrammar's {tools.format} tag opens with a reasoning block that ends at "
            f"{format_end!r} when its builder is told reasoning enabled",
        )
    return None


def _strict_setting(tools: ToolsRequest, build: ToolsBuild) -> Setting | None:
    """vLLM rejected what this setup accepts: its server built a tag, this builder built none."""
    why = (
        "vLLM rejected these tokens, so the server built a tag; this setup builds none "
        f"({build.reason})"
    )
    if tools.strict_tool_calling is False:
        return Setting("strict_tool_calling", True, "turn strict tool calling on", why)
    strict = any((t.get("function") or {}).get("strict") for t in tools.tools)
    if tools.tool_choice != "auto" or strict or tools.strict_level not in (None, "auto"):
        return None
    names = [str(t["function"]["name"]) for t in tools.tools]
    if len(names) == 1:
        return Setting("strict", True, f"turn strict on for tool {names[0]}", why, names[0])
    return Setting("strict_level", "function", "set strict_level to function", why)


def setting_to_try(
    *,
    refused: Sequence[str],
    tools: ToolsRequest | None,
    build: ToolsBuild | None,
    reasoning: str = "none",
    parsers: Sequence[Mapping[str, Any]] = (),
    format_end: str | None = None,
    model: str = "",
    presets: Sequence[str] = (),
    log_rejected: bool = False,
) -> Setting | None:
    """The one setting to try after a replay, or None when nothing reported names one.

    Args:
        refused: the spellings of the replayed tokens from the first refused one on (the
            refused one first; empty: the replay accepted them all).
        tools: the tools source's request (None: another kind).
        build: what its builder built.
        reasoning: the stack reasoning the replay ran under.
        parsers: vLLM's reasoning parsers with their end markers on the model's tokenizer.
        format_end: the end marker of the xgrammar format's reasoning block.
        model: the model's name, to pick among reasoning parsers that all end there.
        presets: the presets whose options take the refused whitespace.
        log_rejected: the replayed ids came from a vLLM log line that says they were rejected.
    """
    if refused and tools is not None:
        found = _reasoning_setting(
            refused, tools, build, reasoning=reasoning, parsers=parsers,
            format_end=format_end, model=model,
        )  # fmt: skip
        if found is not None:
            return found
    if presets:
        label = Preset(presets[0]).label
        why = "its options take this whitespace (any_whitespace=true)"
        return Setting("preset", presets[0], f"set preset to {label}", why)
    if not refused and log_rejected and tools is not None and tools.builder == "vllm":
        if build is not None and build.tag is None:
            return _strict_setting(tools, build)
    return None
