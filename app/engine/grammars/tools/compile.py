"""Compile a ``tools`` source: its builder builds the tag, the structural-tag path compiles it.

The build is cached by source (a vLLM build runs a process); the tag's compile is the compiler's
own cached compile of a ``structural_tag`` spec, so a tools spec costs one tag compile per
tokenizer. With no tag the grammar is any text (every token allowed, as the stack applies no
grammar then), and the answer says so in ``unconstrained``.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from app.engine.grammars.spec import CompileOptions, CompileResult, GrammarKind, GrammarSpec
from app.engine.grammars.structural_tag import TAG_NOT_CARRIED
from app.engine.grammars.tools.base import ToolsBuild, ToolsBuilder
from app.engine.grammars.tools.builders import builder, formats_for
from app.engine.grammars.tools.request import FormatsOf, ParsedTools, parse_tools
from app.engine.grammars.tools.unconstrained import NO_TAG_FORMAT, unconstrained
from app.engine.grammars.tools.xgrammar_builder import ignored_fields
from app.exceptions import GrammarError
from app.paths import split_pointer

__all__ = ["ToolsCompiler", "tag_source"]

CompileTag = Callable[[GrammarSpec], CompileResult]
CachedTag = Callable[[GrammarSpec], "CompileResult | None"]


def tag_source(build: ToolsBuild) -> str:
    """The structural tag compiled for ``build``: its tag, or any text when it has none."""
    tag = build.tag or {"type": "structural_tag", "format": NO_TAG_FORMAT}
    return json.dumps(tag, ensure_ascii=False)


class ToolsCompiler:
    """Builds the tags of ``tools`` sources for one model's tokenizer, and compiles them.

    Args:
        tokenizer: what a builder is told the model's tokenizer is (a directory or hub id).
        builds: how many builds to keep.
        builders: the builder by name (the installed ones by default).
    """

    def __init__(
        self,
        tokenizer: str,
        *,
        builds: int = 128,
        builders: Callable[[str], ToolsBuilder] = builder,
    ) -> None:
        self.tokenizer = tokenizer
        self._builder = builders
        # The installed builders' formats are read once per process (vLLM's run its code).
        # A format's availability is checked against this model's tokenizer (vLLM's start-up
        # check: deepseek_v3 runs on deepseek-v4, whose vocabulary has its markers).
        self._formats: FormatsOf = (
            (lambda name: formats_for(name, tokenizer))
            if builders is builder
            else (lambda name: builders(name).formats())
        )
        self._builds: OrderedDict[str, tuple[ParsedTools, ToolsBuild]] = OrderedDict()
        self._size = builds
        self._lock = threading.Lock()

    def compile(self, spec: GrammarSpec, compile_tag: CompileTag) -> CompileResult:
        """Build the tag of ``spec`` (a ``tools`` spec) and compile it with ``compile_tag``.

        Raises:
            GrammarError: the source is invalid (with its pointer), the builder refuses it, or
                the tag does not compile (placed in the tools source where a tool's parameters
                are the culprit).
        """
        parsed, build = self.build(spec)
        tag_spec = self._tag_spec(spec, build)
        try:
            inner = compile_tag(tag_spec)
        except GrammarError as error:
            raise _placed(error, parsed, tag_spec.source) from None
        return self._result(spec, parsed, build, inner)

    def cached(self, spec: GrammarSpec, cached_tag: CachedTag) -> CompileResult | None:
        """The compile of ``spec`` when both its build and its tag are cached, else None."""
        with self._lock:
            hit = self._builds.get(spec.source)
        if hit is None:
            return None
        inner = cached_tag(self._tag_spec(spec, hit[1]))
        return None if inner is None else self._result(spec, hit[0], hit[1], inner)

    def build(self, spec: GrammarSpec) -> tuple[ParsedTools, ToolsBuild]:
        """The parsed source and its builder's build (cached by source).

        Raises:
            GrammarError: the source is invalid, names a ``$model`` not derived, or the builder
                refuses it.
        """
        with self._lock:
            hit = self._builds.get(spec.source)
            if hit is not None:
                self._builds.move_to_end(spec.source)
                return hit
        parsed = parse_tools(spec.source, self._formats)
        if parsed.models:
            ref = parsed.models[0]
            raise parsed.error_at(
                ref.parts, f"{ref.name!r} must be derived from the pydantic field first (the "
                "server and the CLI do it in the sandbox)",
            )  # fmt: skip
        build = self._builder(parsed.request.builder).build(parsed.request, self.tokenizer)
        with self._lock:
            self._builds[spec.source] = (parsed, build)
            while len(self._builds) > self._size:
                self._builds.popitem(last=False)
        return parsed, build

    @staticmethod
    def _tag_spec(spec: GrammarSpec, build: ToolsBuild) -> GrammarSpec:
        return GrammarSpec(GrammarKind.STRUCTURAL_TAG, tag_source(build), CompileOptions(),
                           spec.library)  # fmt: skip

    @staticmethod
    def _result(
        spec: GrammarSpec, parsed: ParsedTools, build: ToolsBuild, inner: CompileResult
    ) -> CompileResult:
        request = parsed.request
        names = [tool["function"]["name"] for tool in request.tools]
        free = unconstrained(
            build.tag, reason=build.reason, tool_names=names, reasoning_end=build.reasoning_end
        )
        ignored = ignored_fields(request) if request.builder == "xgrammar" else ()
        return dataclasses.replace(
            inner,
            spec=spec,
            tools=build,
            unconstrained=free,
            not_carried=(*TAG_NOT_CARRIED, *ignored),
        )


def _placed(error: GrammarError, parsed: ParsedTools, tag_json: str) -> GrammarError:
    """The tag's error moved into the tools source when it lies in a tool's parameters (found by
    the schema the leaf holds), else the error unplaced (its pointer is into the built tag)."""
    if error.pointer is None or type(error) is not GrammarError:
        return error
    parts = split_pointer(error.pointer)
    node: Any = json.loads(tag_json)
    for depth, part in enumerate(parts):
        if isinstance(node, dict) and node.get("type") == "json_schema" and part == "json_schema":
            for index, tool in enumerate(parsed.request.tools):
                if tool["function"].get("parameters") == node["json_schema"]:
                    where: list[str | int] = ["tools", index, "function", "parameters"]
                    where += parts[depth + 1 :]
                    return parsed.error_at(where, error.message)
            break
        try:
            node = node[int(part)] if isinstance(node, list) else node[part]
        except (KeyError, IndexError, ValueError):
            break
    return GrammarError(f"the built tag does not compile: {error.message}")
