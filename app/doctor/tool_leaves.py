"""Where each tool's call and arguments are in a built tag, read from the tag's structure.

A builder writes a tool's call as a tag (or a string) naming the tool, and the arguments inside
it in one of two ways, whichever release built it:

- one part for the whole arguments: a ``json_schema`` leaf (JSON, or an XML-like ``style``), or
  free text (``any_text``: the arguments as raw text);
- one part per parameter: a string or tag naming the parameter (``<arg_key>paths</arg_key>
  <arg_value>``, ``key="paths"``), then its value (a ``json_schema`` leaf, or ``any_text`` where
  the value is kept as raw text), usually inside a ``star`` or ``or`` (any order, any number of
  times).

Nothing here knows a format: a part goes to the tool the literal texts around it name (as a
whole word), and a per-parameter part is one with a text naming a parameter of that tool between
the tool's text and the part.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["FREE_KINDS", "ParameterValue", "ToolLeaf", "json_leaves", "tool_leaves"]

Parts = tuple[str | int, ...]

#: Formats that take any text: arguments (or a value) the tag leaves free.
FREE_KINDS = ("any_text", "any_tokens")
_LEAF_KINDS = ("json_schema", "qwen_xml_parameter")
#: Formats through which what follows may be left out, chosen among others or repeated.
_LOOSE = ("star", "plus", "or", "optional", "repeat")


@dataclass(frozen=True)
class ParameterValue:
    """One parameter's value as the tag writes it.

    Attributes:
        name: the parameter (a key of the tool's ``properties``).
        value: the format of its value (``json_schema``, ``any_text``, ...).
        loose: reached through a ``star``, ``plus``, ``or``, ``optional`` or ``repeat`` inside
            the call: a call may leave the parameter out, or write it again.
    """

    name: str
    value: dict[str, Any]
    loose: bool


@dataclass(frozen=True)
class ToolLeaf:
    """Where a tool's call and arguments are in the tag built.

    Attributes:
        index: the tool's position in the source's ``tools``.
        name: its function name.
        leaf: the ``json_schema`` format holding its whole arguments (None: the tag has none).
        called: the tag writes a call of the tool (its name, in a tag or a string).
        parameters: each parameter's value, where the tag writes the parameters one by one.
        free: the format taking the whole arguments as free text (``any_text``), if any.
    """

    index: int
    name: str
    leaf: dict[str, Any] | None
    called: bool = False
    parameters: tuple[ParameterValue, ...] = ()
    free: dict[str, Any] | None = None


@dataclass(frozen=True)
class _Text:
    """A literal text of the tag (a tag's begin, a string), and where it is."""

    text: str
    at: Parts


@dataclass(frozen=True)
class _Part:
    """A part of the tag that writes a value, with the texts enclosing or preceding it (outer
    first) and, for each loose format it lies in, how many of those texts were outside it."""

    node: dict[str, Any]
    texts: tuple[_Text, ...]
    loops: tuple[int, ...]
    at: Parts


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _parts(
    node: Any, texts: tuple[_Text, ...], loops: tuple[int, ...], at: Parts
) -> Iterator[_Part]:
    """Every value part in document order."""
    if isinstance(node, list):
        for index, item in enumerate(node):
            yield from _parts(item, texts, loops, (*at, index))
        return
    if not isinstance(node, dict):
        return
    kind = node.get("type")
    if kind in _LEAF_KINDS or kind in FREE_KINDS:
        yield _Part(node, texts, loops, at)
        return
    if kind in _LOOSE:
        loops = (*loops, len(texts))
    if kind == "tag":
        begin = _Text(_text(node.get("begin")), (*at, "begin"))
        yield from _parts(node.get("content"), (*texts, begin), loops, (*at, "content"))
        return
    if kind == "sequence":
        before = texts
        for index, element in enumerate(node.get("elements", [])):
            where = (*at, "elements", index)
            yield from _parts(element, before, loops, where)
            if isinstance(element, dict) and element.get("type") == "const_string":
                before = (*before, _Text(str(element.get("value", "")), where))
        return
    for key, value in node.items():
        if key != "type":
            yield from _parts(value, texts, loops, (*at, key))


def json_leaves(node: Any, at: Parts = ()) -> Iterator[tuple[dict[str, Any], Parts]]:
    """Every ``json_schema`` leaf below ``node`` in document order, with its place."""
    for part in _parts(node, (), (), at):
        if part.node.get("type") in _LEAF_KINDS:
            yield part.node, part.at


def _named(names: Sequence[str], text: str, common: frozenset[str] = frozenset()) -> int | None:
    """The one of ``names`` that ``text`` writes as a whole word (the longest, leaving out a
    name every sibling text writes too, when another is written: ``type="string"`` beside
    ``key="query"``)."""
    hits = [i for i, name in enumerate(names) if name and _word(name).search(text)]
    kept = [i for i in hits if names[i] not in common] or hits
    return max(kept, key=lambda i: len(names[i])) if kept else None


def _word(name: str) -> re.Pattern[str]:
    return re.compile(rf"(?<!\w){re.escape(name)}(?!\w)")


def _owner(part: _Part, names: Sequence[str], wrappers: set[Parts]) -> tuple[int, int] | None:
    """The tool whose call ``part`` is in, and the position of the text naming it: the outermost
    text naming a tool (an inner one may name a parameter that has a tool's name), texts that
    enclose every part (the calls' wrapper) left out."""
    for position, text in enumerate(part.texts):
        if text.at in wrappers:
            continue
        index = _named(names, text.text)
        if index is not None:
            return index, position
    return None


def _parameter(
    texts: Sequence[_Text], declared: Sequence[str], common: frozenset[str]
) -> str | None:
    """The parameter the innermost of ``texts`` naming one names."""
    for text in reversed(texts):
        index = _named(declared, text.text, common)
        if index is not None:
            return declared[index]
    return None


def _declared(tool: dict[str, Any]) -> list[str]:
    parameters = tool.get("function", {}).get("parameters")
    properties = parameters.get("properties") if isinstance(parameters, dict) else None
    return [str(name) for name in properties] if isinstance(properties, dict) else []


def tool_leaves(tag: dict[str, Any] | None, tools: Sequence[dict[str, Any]]) -> list[ToolLeaf]:
    """Each tool's call and arguments in ``tag`` (a built ``{"type": "structural_tag", ...}``).

    A part goes to the tool its enclosing texts name; failing that (a ``json_schema`` leaf), to
    the one tool whose parameters it holds, or by position when there are as many leaves as
    tools. A tool with several whole-argument leaves (e.g. one branch per reasoning mode) gets
    its first constrained one.
    """
    names = [str(t.get("function", {}).get("name", "")) for t in tools]
    format_ = tag.get("format") if tag else None
    found = list(_parts(format_, (), (), ("format",)))
    wrappers: set[Parts] = set()
    if len(tools) > 1 and len(found) > 1:
        wrappers = set.intersection(*({t.at for t in p.texts} for p in found))
    owned: list[tuple[_Part, int, int]] = []
    leaves = [p for p in found if p.node.get("type") in _LEAF_KINDS]
    for part in found:
        owner = _owner(part, names, wrappers)
        if owner is None and part in leaves:
            index = _by_schema(part.node, tools)
            if index is None and len(leaves) == len(tools):
                index = leaves.index(part)
            owner = None if index is None else (index, -1)
        if owner is not None:
            owned.append((part, *owner))
    texts = list(_all_texts(format_))
    return [
        _tool(i, name, tools[i], [(p, at) for p, t, at in owned if t == i], texts)
        for i, name in enumerate(names)
    ]


def _by_schema(leaf: dict[str, Any], tools: Sequence[dict[str, Any]]) -> int | None:
    schema = leaf.get("json_schema")
    same = [i for i, t in enumerate(tools) if t.get("function", {}).get("parameters") == schema]
    return same[0] if len(same) == 1 else None


def _tool(
    index: int, name: str, tool: dict[str, Any], parts: list[tuple[_Part, int]], texts: list[str]
) -> ToolLeaf:
    """One tool's parts sorted into whole arguments and parameters (``texts``: every literal
    text of the tag, for a tool called with no value part)."""
    declared = _declared(tool)
    inner = [part.texts[at + 1 :] if at >= 0 else () for part, at in parts]
    # a name every part's texts write is the format's wording, not a parameter's name
    written = [
        {n for n in declared if any(_word(n).search(t.text) for t in each)} for each in inner
    ]
    common = frozenset(set.intersection(*written)) if len(written) > 1 else frozenset()
    leaf: dict[str, Any] | None = None
    free: dict[str, Any] | None = None
    values: list[ParameterValue] = []
    for (part, at), each in zip(parts, inner, strict=True):
        parameter = _parameter(each, declared, common)
        if parameter is not None:
            loose = any(outside > at for outside in part.loops)
            values.append(ParameterValue(parameter, part.node, loose))
        elif part.node.get("type") in FREE_KINDS:
            free = free or part.node
        elif leaf is None or leaf.get("json_schema") is True:
            leaf = part.node
    called = bool(parts) or any(_word(name).search(text) for text in texts if name)
    return ToolLeaf(index, name, leaf, called, tuple(values), free)


def _all_texts(node: Any) -> Iterator[str]:
    """Every literal text of a tag: its tags' begins and its strings."""
    if isinstance(node, list):
        for item in node:
            yield from _all_texts(item)
    elif isinstance(node, dict):
        if node.get("type") == "tag":
            yield _text(node.get("begin"))
        elif node.get("type") == "const_string":
            yield str(node.get("value", ""))
        for key, value in node.items():
            if key != "type":
                yield from _all_texts(value)
