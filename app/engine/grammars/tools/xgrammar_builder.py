"""The xgrammar (SGLang) builder: ``xgrammar.get_model_structural_tag`` on the installed 0.2.9.

Its formats are the keys xgrammar registers (read at run time). The request's ``reasoning`` is
passed as xgrammar's reasoning mode; ``tool_choice`` and ``parallel_tool_calls`` as they are. The
fields that only vLLM takes (``strict_level``, ``reasoning_parser``, ``response_format``,
``strict_tool_calling``) are not carried: :func:`ignored_fields` names the ones a request set.
The marker that ends the reasoning is read from the built tag (see :func:`reasoning_end`).
"""

from __future__ import annotations

import importlib.metadata
import json
from collections.abc import Iterator
from typing import Any

import pydantic
import xgrammar as xgr

from app.engine.grammars.tools.base import BuilderName, ToolFormat, ToolsBuild, ToolsRequest
from app.exceptions import GrammarError

__all__ = ["VLLM_ONLY_FIELDS", "XgrammarBuilder", "ignored_fields", "reasoning_end"]

#: The request fields ``get_model_structural_tag`` has no parameter for.
VLLM_ONLY_FIELDS = ("strict_level", "reasoning_parser", "response_format", "strict_tool_calling")


def ignored_fields(request: ToolsRequest) -> tuple[str, ...]:
    """The vLLM-only fields ``request`` sets, which the xgrammar builder does not take."""
    return tuple(name for name in VLLM_ONLY_FIELDS if getattr(request, name) is not None)


def _keys() -> list[str]:
    # xgrammar 0.2.9 has no public listing of its formats: its registry is the one source.
    from xgrammar import builtin_structural_tag

    registry: dict[str, Any] = builtin_structural_tag._structural_tag_registry
    return sorted(registry)


def _free_tags(node: Any) -> Iterator[dict[str, Any]]:
    """The tags whose content is free text, outermost first, in the tag's order."""
    if isinstance(node, dict):
        content = node.get("content")
        if node.get("type") == "tag" and isinstance(content, dict):
            if content.get("type") in ("any_text", "any_tokens"):
                yield node
        for value in node.values():
            yield from _free_tags(value)
    elif isinstance(node, list):
        for value in node:
            yield from _free_tags(value)


def _marker(end: Any) -> str | None:
    if isinstance(end, str):
        return end or None
    if isinstance(end, list):
        return next((str(e) for e in end if e), None)
    if isinstance(end, dict):  # a token format
        return str(end.get("token"))
    return None


def reasoning_end(tag: dict[str, Any], without_reasoning: dict[str, Any]) -> str | None:
    """The end of the reasoning block: the end of the first free-text tag of ``tag`` that the
    same request built with reasoning disabled does not have (None when there is none)."""
    plain = [json.dumps(t, sort_keys=True) for t in _free_tags(without_reasoning)]
    for candidate in _free_tags(tag):
        if json.dumps(candidate, sort_keys=True) not in plain:
            return _marker(candidate.get("end"))
    return None


class XgrammarBuilder:
    """``xgrammar.get_model_structural_tag``: what SGLang applies for tools and reasoning."""

    name: BuilderName = "xgrammar"

    def formats(self) -> list[ToolFormat]:
        """Every format key xgrammar registers; each builds a tag (xgrammar always does)."""
        rows = []
        for key in _keys():
            try:
                enabled = self._tag(key, [], "auto", "enabled", True)
                disabled = self._tag(key, [], "auto", "disabled", True)
                end = reasoning_end(enabled, disabled)
            except (ValueError, pydantic.ValidationError) as error:
                rows.append(ToolFormat("xgrammar", key, True, None, False, str(error)))
                continue
            rows.append(ToolFormat("xgrammar", key, True, end, True))
        return rows

    def build(self, request: ToolsRequest, tokenizer: str) -> ToolsBuild:
        """The tag ``get_model_structural_tag`` builds (``tokenizer`` is not used: xgrammar
        writes its markers as text).

        Raises:
            GrammarError: xgrammar refuses the request (its message).
        """
        tools = [dict(tool) for tool in request.tools]
        choice = request.tool_choice
        parallel = request.parallel_tool_calls
        tag = self._tag(request.format, tools, choice, request.reasoning, parallel, refuse=True)
        end = None
        if request.reasoning != "disabled":
            plain = self._tag(request.format, tools, choice, "disabled", parallel, refuse=True)
            end = reasoning_end(tag, plain)
        notes = tuple(
            f"{name} is vLLM's: xgrammar's get_model_structural_tag does not take it"
            for name in ignored_fields(request)
        )
        return ToolsBuild(
            tag, None, end, {"xgrammar": importlib.metadata.version("xgrammar")}, notes
        )

    @staticmethod
    def _tag(
        key: str,
        tools: list[dict[str, Any]],
        choice: Any,
        reasoning: str,
        parallel: bool,
        *,
        refuse: bool = False,
    ) -> dict[str, Any]:
        try:
            tag = xgr.get_model_structural_tag(
                key,
                tools=tools,
                tool_choice=choice,
                reasoning=reasoning,
                parallel_tool_calls=parallel,
            )
        except (ValueError, pydantic.ValidationError) as error:
            if not refuse:
                raise
            message = str(error).splitlines()[0]
            raise GrammarError(
                f"xgrammar's get_model_structural_tag refuses it: {message}"
            ) from None
        built: dict[str, Any] = json.loads(tag.model_dump_json())
        return built
