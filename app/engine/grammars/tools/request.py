"""A ``tools`` source: parse and validate it into a :class:`ToolsRequest`, every error placed.

The source is JSON (the contract's fields: a builder, its format, OpenAI Chat Completions tools,
``tool_choice``, ``reasoning``, ..., and a ``chat_template`` the user pasted). Each bad field is
a :class:`GrammarError` with the JSON pointer into the source (and its line and column). A
tool's ``parameters`` may be ``{"$model": "Name"}``, naming a Pydantic model of the source's
``pydantic`` field: parsing only lists those references (:attr:`ParsedTools.models`); the web
layer and the CLI derive them all in one sandbox run, and :meth:`ParsedTools.with_models` writes
each derived schema in the place of its reference (or raises a model's error, placed).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jsonschema

from app.engine.grammars.jsonschema_safe import error_list, meta_validator
from app.engine.grammars.structural_tag import json_object, tag_error
from app.engine.grammars.tools.base import ToolFormat, ToolsRequest
from app.engine.jsonpointer import locate
from app.exceptions import GrammarError, PydanticFailed
from app.paths import pointer_from_parts

__all__ = ["MODEL_KEY", "FormatsOf", "ModelRef", "ParsedTools", "parse_tools"]

#: The key of a tool's ``parameters`` that names a Pydantic model of the ``pydantic`` field.
MODEL_KEY = "$model"
#: How the sandbox's message for a model the source does not define begins.
_NO_MODEL = "no model named"

_BUILDERS = ("vllm", "xgrammar")
_CHOICES = ("none", "auto", "required")
_REASONING = ("enabled", "disabled", "auto")
_FIELDS = ("builder", "format", "tools", "tool_choice", "reasoning", "parallel_tool_calls",
           "strict_level", "reasoning_parser", "response_format", "strict_tool_calling",
           "pydantic", "chat_template")  # fmt: skip
_TOOL_FIELDS = ("type", "function")
_FUNCTION_FIELDS = ("name", "description", "parameters", "strict")

Parts = list[str | int]
#: The formats a builder lists (raises GrammarError when the builder is unavailable).
FormatsOf = Callable[[str], Sequence[ToolFormat]]


@dataclass(frozen=True)
class ModelRef:
    """A tool whose ``parameters`` name a Pydantic model.

    Attributes:
        index: the tool's index in ``tools``.
        name: the model's name in the ``pydantic`` source.
    """

    index: int
    name: str

    @property
    def parts(self) -> Parts:
        """Where the reference is written in the source."""
        return ["tools", self.index, "function", "parameters", MODEL_KEY]


@dataclass(frozen=True)
class ParsedTools:
    """A validated ``tools`` source.

    Attributes:
        source: the source as written.
        request: the request (a tool naming a model keeps ``{"$model": ...}`` as its parameters).
        pydantic: the ``pydantic`` field, or None.
        models: the tools whose parameters name a model, in the order of ``tools``.
    """

    source: str
    request: ToolsRequest
    pydantic: str | None
    models: tuple[ModelRef, ...]

    def resolved(self, schemas: dict[str, dict[str, Any]]) -> str:
        """The source with each ``{"$model": ...}`` replaced by its derived schema, written on
        the line of its reference (the rest of the source as it was, so that a line named by
        an error is the user's line): what the engine compiles.

        Raises:
            GrammarError: a derived schema is not a valid JSON Schema (pointed at its ``$model``).
        """
        text = self.source
        spans = []
        for ref in self.models:
            schema = schemas[ref.name]
            _check_schema(self.source, ref.parts, schema, inside=False)
            spans.append((*_span(self.source, ref.parts[:-1]), json.dumps(schema)))
        for start, end, schema_text in sorted(spans, reverse=True):
            kept = "\n" * text.count("\n", start, end)  # the lines after keep their numbers
            text = text[:start] + schema_text + kept + text[end:]
        return text

    def error_at(self, parts: Parts, message: str) -> GrammarError:
        """A :class:`GrammarError` at ``parts`` of the source."""
        return tag_error(self.source, parts, message)

    def with_models(self, derived: Mapping[str, dict[str, Any] | GrammarError]) -> str:
        """:meth:`resolved` with what the sandbox derived for each model: its schema, or the
        error deriving it, raised placed (:meth:`model_error`) for the first tool that has one.

        Raises:
            GrammarError: a model failed (its error placed), or a schema is not a JSON Schema.
        """
        schemas: dict[str, dict[str, Any]] = {}
        for ref in self.models:
            outcome = derived[ref.name]
            if isinstance(outcome, GrammarError):
                raise self.model_error(outcome, ref.parts)
            schemas[ref.name] = outcome
        return self.resolved(schemas)

    def model_error(self, error: GrammarError, parts: Parts) -> GrammarError:
        """The sandbox's ``error`` placed in this source: a model it does not define at the
        ``$model`` naming it (``parts``), anything else at the ``pydantic`` field. A refused
        source or an unconfined sandbox keeps its own class (so its code); a Pydantic failure
        becomes a plain :class:`GrammarError`, as any bad field of the source."""
        where: Parts = parts if error.message.startswith(_NO_MODEL) else ["pydantic"]
        located = self.error_at(where, f"the pydantic field: {error.message}")
        if isinstance(error, PydanticFailed) or type(error) is GrammarError:
            return located
        return type(error)(
            located.message, line=located.line, column=located.column, pointer=located.pointer
        )


def _span(source: str, parts: Parts) -> tuple[int, int]:
    """Where the value at ``parts`` is written in ``source``: its start and end offsets."""
    where = locate(source, pointer_from_parts(parts))
    assert where is not None  # the parts came from parsing this very source
    line, column = where
    start = sum(len(text) for text in source.splitlines(keepends=True)[: line - 1]) + column - 1
    _, end = json.JSONDecoder().raw_decode(source, start)
    return start, end


def parse_tools(source: str, formats_of: FormatsOf | None = None) -> ParsedTools:
    """Parse and validate a ``tools`` source.

    Args:
        source: the JSON source.
        formats_of: the formats each builder lists (default: the installed builders).

    Raises:
        GrammarError: not JSON, or a bad field: an unknown field, builder or format, a tool
            without ``function.name``, parameters that are not a JSON Schema, a ``tool_choice``
            naming no tool... with the pointer to it.
    """
    data = json_object(source, "tools source")
    for key in data:
        if key not in _FIELDS:
            raise tag_error(
                source, [key], f"unknown field {key!r}; the fields: {', '.join(_FIELDS)}"
            )
    _format(source, data, formats_of)
    pydantic = _optional(source, data, "pydantic", str)
    tools, models = _tools(source, data, pydantic is not None)
    request = ToolsRequest(
        builder=data["builder"],
        format=data["format"],
        tools=tools,
        tool_choice=_tool_choice(source, data, tools),
        reasoning=_one_of(source, data, "reasoning", _REASONING, "auto"),  # type: ignore[arg-type]
        parallel_tool_calls=_optional(source, data, "parallel_tool_calls", bool, True),
        strict_level=_optional(source, data, "strict_level", str),
        reasoning_parser=_optional(source, data, "reasoning_parser", str),
        response_format=_optional(source, data, "response_format", dict),
        strict_tool_calling=_optional(source, data, "strict_tool_calling", bool),
        chat_template=_chat_template(source, data),
    )
    return ParsedTools(source, request, pydantic, models)


def _chat_template(source: str, data: dict[str, Any]) -> str | None:
    """The pasted chat template, checked as Jinja (the syntax only: a template that parses but
    fails to render is refused, at the same pointer, when it is rendered)."""
    text = _optional(source, data, "chat_template", str)
    if text is None:
        return None
    import jinja2
    import jinja2.ext
    import jinja2.sandbox

    # the extensions transformers compiles chat templates with (`{% break %}`, `{% continue %}`)
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(extensions=[jinja2.ext.loopcontrols])
    try:
        env.parse(text)
    except jinja2.TemplateSyntaxError as error:
        message = f"the chat template is not valid Jinja: line {error.lineno}: {error.message}"
        raise tag_error(source, ["chat_template"], message) from None
    return str(text)


def _format(source: str, data: dict[str, Any], formats_of: FormatsOf | None) -> None:
    if "builder" not in data:
        raise tag_error(source, [], f"missing field 'builder' (one of {', '.join(_BUILDERS)})")
    builder = data["builder"]
    if builder not in _BUILDERS:
        raise tag_error(
            source, ["builder"], f"unknown builder {builder!r}: one of {', '.join(_BUILDERS)}"
        )
    if "format" not in data:
        raise tag_error(source, [], f"missing field 'format' (a format of the {builder} builder)")
    name = data["format"]
    if not isinstance(name, str):
        raise tag_error(source, ["format"], "the format is a string: a name the builder lists")
    if formats_of is None:
        from app.engine.grammars.tools.builders import formats_of as installed

        formats_of = installed
    try:
        known = {f.name: f for f in formats_of(builder)}
    except GrammarError as exc:
        raise tag_error(source, ["builder"], str(exc)) from None
    found = known.get(name)
    if found is None:
        raise tag_error(
            source,
            ["format"],
            f"unknown format {name!r} for the {builder} builder; its formats: "
            + ", ".join(sorted(known)),
        )
    if not found.available:
        raise tag_error(source, ["format"], f"format {name!r} is unavailable: {found.reason}")


def _optional(source: str, data: dict[str, Any], key: str, kind: type, default: Any = None) -> Any:
    value = data.get(key)
    if value is None:
        return default
    wrong = not isinstance(value, kind) or (kind is not bool and isinstance(value, bool))
    if wrong:
        names = {str: "a string", bool: "true or false", dict: "an object"}
        raise tag_error(source, [key], f"{key} is {names[kind]} (or null), got {_json_type(value)}")
    return value


def _one_of(
    source: str, data: dict[str, Any], key: str, allowed: tuple[str, ...], default: str
) -> str:
    value = data.get(key, default)
    if value not in allowed:
        raise tag_error(source, [key], f"{key} is one of {', '.join(allowed)}; got {value!r}")
    return str(value)


def _json_type(value: Any) -> str:
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string",
             list: "an array", dict: "an object", type(None): "null"}  # fmt: skip
    return names.get(type(value), type(value).__name__)


def _tools(
    source: str, data: dict[str, Any], has_pydantic: bool
) -> tuple[tuple[dict[str, Any], ...], tuple[ModelRef, ...]]:
    tools = data.get("tools", [])
    if not isinstance(tools, list):
        raise tag_error(source, ["tools"], f"tools is an array of tools, got {_json_type(tools)}")
    seen: dict[str, int] = {}
    refs: list[ModelRef] = []
    out: list[dict[str, Any]] = []
    for index, tool in enumerate(tools):
        where: Parts = ["tools", index]
        function = _function(source, tool, where)
        name = function["name"]
        if name in seen:
            raise tag_error(
                source,
                [*where, "function", "name"],
                f"tool {name!r} is defined twice (first at /tools/{seen[name]})",
            )
        seen[name] = index
        ref = _parameters(source, function, [*where, "function", "parameters"], has_pydantic)
        if ref is not None:
            refs.append(ModelRef(index, ref))
        out.append({**tool, "type": "function"})
    return tuple(out), tuple(refs)


def _function(source: str, tool: Any, where: Parts) -> dict[str, Any]:
    if not isinstance(tool, dict):
        raise tag_error(source, where, f"a tool is an object, got {_json_type(tool)}")
    for key in tool:
        if key not in _TOOL_FIELDS:
            raise tag_error(source, [*where, key], f"unknown field {key!r} of a tool")
    if tool.get("type", "function") != "function":
        raise tag_error(source, [*where, "type"], 'a tool\'s type is "function" (the only one)')
    function = tool.get("function")
    if not isinstance(function, dict):
        missing = "function" not in tool
        raise tag_error(
            source,
            where if missing else [*where, "function"],
            "missing field 'function'" if missing else "function is an object",
        )
    for key in function:
        if key not in _FUNCTION_FIELDS:
            raise tag_error(
                source,
                [*where, "function", key],
                f"unknown field {key!r} of a function; its fields: {', '.join(_FUNCTION_FIELDS)}",
            )
    name = function.get("name")
    if "name" not in function:
        raise tag_error(source, [*where, "function"], "a tool needs function.name")
    if not isinstance(name, str) or not name:
        raise tag_error(source, [*where, "function", "name"], "function.name is a non-empty string")
    for key, kind in (("description", str), ("strict", bool)):
        value = function.get(key)
        if value is not None and not isinstance(value, kind):
            raise tag_error(
                source, [*where, "function", key], f"function.{key} is {_json_type(kind())}"
            )
    return function


def _parameters(
    source: str, function: dict[str, Any], where: Parts, has_pydantic: bool
) -> str | None:
    """Check a tool's parameters; the model's name when they name one."""
    if "parameters" not in function or function["parameters"] is None:
        return None
    schema = function["parameters"]
    if isinstance(schema, dict) and MODEL_KEY in schema:
        name = schema[MODEL_KEY]
        if len(schema) != 1:
            extra = next(key for key in schema if key != MODEL_KEY)
            raise tag_error(source, [*where, extra], f"{MODEL_KEY} stands alone: no {extra!r}")
        if not isinstance(name, str) or not name:
            raise tag_error(source, [*where, MODEL_KEY], f"{MODEL_KEY} names a model: a string")
        if not has_pydantic:
            raise tag_error(
                source,
                [*where, MODEL_KEY],
                f"{MODEL_KEY} names the Pydantic model {name!r}, but the source has no "
                "'pydantic' field to find it in",
            )
        return name
    if not isinstance(schema, dict | bool):
        raise tag_error(
            source, where, f"parameters is a JSON Schema (an object), got {_json_type(schema)}"
        )
    _check_schema(source, where, schema, inside=True)
    return None


def _check_schema(source: str, where: Parts, schema: Any, *, inside: bool) -> None:
    error = jsonschema.exceptions.best_match(error_list(meta_validator(schema), schema))
    if error is not None:
        inner = list(error.absolute_path) if inside else []
        raise tag_error(source, [*where, *inner], f"not a valid JSON Schema: {error.message}")


def _tool_choice(source: str, data: dict[str, Any], tools: Sequence[dict[str, Any]]) -> Any:
    choice = data.get("tool_choice", "auto")
    names = [tool["function"]["name"] for tool in tools]
    listed = ", ".join(names) if names else "none defined"
    if isinstance(choice, str):
        if choice not in _CHOICES:
            raise tag_error(
                source,
                ["tool_choice"],
                f"tool_choice is one of {', '.join(_CHOICES)} or "
                '{"type": "function", "function": {"name": ...}}; got ' + repr(choice),
            )
        if choice == "required" and not tools:
            raise tag_error(source, ["tool_choice"], "tool_choice 'required' needs a tool")
        return choice
    if not isinstance(choice, dict):
        raise tag_error(source, ["tool_choice"], f"tool_choice is a string or an object, got "
                        f"{_json_type(choice)}")  # fmt: skip
    if choice.get("type") != "function":
        raise tag_error(source, ["tool_choice", "type"], 'a named tool choice has type "function"')
    function = choice.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise tag_error(source, ["tool_choice"], "a named tool choice has function.name")
    if function["name"] not in names:
        raise tag_error(
            source,
            ["tool_choice", "function", "name"],
            f"tool_choice names {function['name']!r}, which is no tool (tools: {listed})",
        )
    return {"type": "function", "function": {"name": function["name"]}}
