"""What a tools builder takes and gives: the one interface the vLLM and xgrammar builders share.

A builder turns a request's tools, tool choice and a model family's call syntax into the
structural tag its library would apply, or says why it builds none. It is told the tokenizer of
the model the tag is for (some of vLLM's parsers insist that their markers are single tokens).
What a tag leaves unconstrained is not the builder's to say: it is read from the tag itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

__all__ = ["ToolFormat", "ToolsBuild", "ToolsBuilder", "ToolsRequest"]

BuilderName = Literal["vllm", "xgrammar"]
ToolChoice = str | dict[str, Any]  # "none" | "auto" | "required" | {"type": "function", ...}


@dataclass(frozen=True)
class ToolsRequest:
    """A ``tools`` source, validated (the contract's fields; a ``$model`` already derived).

    Attributes:
        builder: ``vllm`` or ``xgrammar``.
        format: the builder's own format name (a vLLM ``--tool-call-parser``, an xgrammar key).
        tools: OpenAI Chat Completions tools, each ``parameters`` a JSON Schema.
        tool_choice: ``none``, ``auto``, ``required`` or one named function.
        reasoning: what the builder is told: ``enabled``, ``disabled`` or ``auto``.
        parallel_tool_calls: whether several calls may follow each other.
        strict_level: vLLM's ``--tool-strict-level`` (None: the parser's default).
        reasoning_parser: vLLM's ``--reasoning-parser`` (None: none).
        response_format: an OpenAI ``response_format`` sent with the tools, if any.
        strict_tool_calling: vLLM's ``VLLM_ENFORCE_STRICT_TOOL_CALLING`` (None: vLLM's default).
        chat_template: a chat template the user pasted: the round trip and the rendered prompt
            use it instead of the model's own (None: the model's).
    """

    builder: BuilderName
    format: str
    tools: tuple[dict[str, Any], ...]
    tool_choice: ToolChoice = "auto"
    reasoning: Literal["enabled", "disabled", "auto"] = "auto"
    parallel_tool_calls: bool = True
    strict_level: str | None = None
    reasoning_parser: str | None = None
    response_format: dict[str, Any] | None = None
    strict_tool_calling: bool | None = None
    chat_template: str | None = None


@dataclass(frozen=True)
class ToolFormat:
    """One format a builder knows, as ``GET /api/tool-formats`` lists it."""

    builder: BuilderName
    name: str
    builds_tag: bool
    reasoning_end: str | None
    available: bool
    reason: str | None = None


@dataclass(frozen=True)
class ToolsBuild:
    """What a builder made of a request.

    Attributes:
        tag: the structural tag (``{"type": "structural_tag", "format": ...}``), or None when the
            builder builds none for this request.
        reason: why there is no tag (the builder's own reason), when ``tag`` is None.
        reasoning_end: the marker that ends the reasoning (from the tag or vLLM's reasoning
            parser), None when the request has no reasoning.
        builder_versions: the libraries that built it, e.g. ``{"vllm": "0.32.0",
            "xgrammar": "0.2.8"}``.
        notes: what the builder's version does differently from the xgrammar that masks.
    """

    tag: dict[str, Any] | None
    reason: str | None
    reasoning_end: str | None
    builder_versions: dict[str, str]
    notes: tuple[str, ...] = field(default=())


class ToolsBuilder(Protocol):
    """A library's way of building a structural tag from tools."""

    name: BuilderName

    def formats(self) -> list[ToolFormat]:
        """Every format this builder knows, read from the installed library at run time."""
        ...

    def build(self, request: ToolsRequest, tokenizer: str) -> ToolsBuild:
        """The tag this library builds for ``request`` on ``tokenizer`` (a directory or hub id).

        Raises:
            GrammarError: the library refuses the request (its message, with a pointer into the
                source where one can be found).
        """
        ...
