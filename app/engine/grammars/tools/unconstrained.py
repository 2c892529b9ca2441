"""What a tools tag leaves unconstrained, in plain words, read from the tag itself.

Not from the builder: a tag says what it constrains, so the free text (before, between and after
calls), arguments any JSON may fill (``json_schema: true``, a tool that is not strict) and the
reasoning are found by walking it. A tool is named by the tool name its enclosing tag writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["NO_TAG_FORMAT", "unconstrained"]

#: What is compiled when a builder makes no tag: any text, every token allowed (what the stack
#: does then: it applies no grammar).
NO_TAG_FORMAT: dict[str, Any] = {"type": "any_text"}

_FREE = ("any_text", "any_tokens")


def unconstrained(
    tag: dict[str, Any] | None,
    *,
    reason: str | None,
    tool_names: Sequence[str],
    reasoning_end: str | None,
) -> tuple[str, ...]:
    """Plain sentences saying what ``tag`` leaves free.

    Args:
        tag: the structural tag built, or None when the builder made none.
        reason: the builder's reason for making none.
        tool_names: the request's tools, to name the call an argument belongs to.
        reasoning_end: the marker that ends the reasoning, to tell reasoning from other text.
    """
    if tag is None:
        why = f" ({reason})" if reason else ""
        return (
            f"no tag: the call is not constrained{why}; Maskscope compiles any text, so every "
            "token is allowed",
        )
    walker = _Walker(tuple(tool_names), reasoning_end)
    walker.walk(tag.get("format"), ())
    return tuple(walker.found) or ("nothing: every part of the output is constrained",)


def _quoted(texts: Sequence[Any]) -> str:
    return ", ".join(repr(str(t)) for t in texts)


def _never(node: dict[str, Any]) -> str:
    excludes = node.get("excludes") or node.get("exclude_tokens") or []
    return f" (never {_quoted(excludes)})" if excludes else ""


def _end(end: Any) -> str:
    if isinstance(end, list):
        return " or ".join(repr(str(e)) for e in end)
    if isinstance(end, dict):
        return repr(str(end.get("token")))
    return repr(str(end))


class _Walker:
    def __init__(self, tool_names: tuple[str, ...], reasoning_end: str | None) -> None:
        # Longest first: the name a tag writes is the longest tool name it contains.
        self.names = sorted(tool_names, key=len, reverse=True)
        self.reasoning_end = reasoning_end
        self.found: list[str] = []

    def say(self, sentence: str) -> None:
        if sentence not in self.found:
            self.found.append(sentence)

    def tool(self, context: tuple[str, ...]) -> str:
        for name in self.names:
            if any(name in text for text in context):
                return name
        return "a call"

    def walk(self, node: Any, context: tuple[str, ...]) -> None:
        if not isinstance(node, dict):
            return
        kind = node.get("type")
        if kind in _FREE:
            self.say(f"free text: any text{_never(node)}")
        elif kind == "tag":
            self.tag(node, context)
        elif kind == "json_schema":
            self.arguments(node, context)
        elif kind in ("triggered_tags", "token_triggered_tags"):
            self.triggered(node, context)
        elif kind == "tags_with_separator":
            for tag in node.get("tags", []):
                self.walk(tag, context)
        elif kind == "sequence":
            seen = context
            for element in node.get("elements", []):
                self.walk(element, seen)
                if isinstance(element, dict) and element.get("type") == "const_string":
                    seen = (*seen, str(element.get("value", "")))
        elif kind == "or":
            for element in node.get("elements", []):
                self.walk(element, context)
        elif kind in ("optional", "plus", "star", "repeat"):
            self.walk(node.get("content"), context)
        elif kind in ("dispatch", "token_dispatch"):
            after = "between" if node.get("loop", True) else "before"
            self.say(f"free text {after} the dispatched parts{_never(node)}")
            for _, rule in node.get("rules", []):
                self.walk(rule, context)

    def tag(self, node: dict[str, Any], context: tuple[str, ...]) -> None:
        content = node.get("content")
        begin = node.get("begin")
        begin_text = str(begin.get("token")) if isinstance(begin, dict) else str(begin or "")
        if isinstance(content, dict) and content.get("type") in _FREE:
            end = node.get("end")
            ends = end if isinstance(end, list) else [end]
            marker = [str(e.get("token")) if isinstance(e, dict) else str(e) for e in ends]
            if self.reasoning_end is not None and self.reasoning_end in marker:
                self.say(f"reasoning: any text until {_end(end)}{_never(content)}")
            else:
                opened = f"after {begin_text!r} " if begin_text else ""
                self.say(f"text {opened}until {_end(end)}: any text{_never(content)}")
            return
        self.walk(content, (*context, begin_text))

    def arguments(self, node: dict[str, Any], context: tuple[str, ...]) -> None:
        schema = node.get("json_schema")
        if schema is True or schema == {}:
            style = node.get("style", "json")
            what = "any JSON" if style == "json" else f"any arguments ({style} style)"
            self.say(f"arguments of {self.tool(context)}: {what}")

    def triggered(self, node: dict[str, Any], context: tuple[str, ...]) -> None:
        triggers = node.get("triggers") or node.get("trigger_tokens") or []
        first, once = bool(node.get("at_least_one")), bool(node.get("stop_after_first"))
        starts = f"a call begins at {_quoted(triggers)}"
        never = _never(node)
        if not first and not once:
            self.say(f"free text before, between and after calls{never} ({starts})")
        elif not first:
            self.say(f"free text before the call{never} ({starts}; the output ends after it)")
        elif not once:
            self.say(f"free text between and after calls{never} (the output begins with a call)")
        for tag in node.get("tags", []):
            self.walk(tag, context)
