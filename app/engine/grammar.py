"""What a user asks to compile, and what the compile produced (grammar text, warnings, stats)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from app.exceptions import InvalidInput

__all__ = ["PRESETS", "CompileOptions", "CompileResult", "GrammarKind", "GrammarSpec"]


class GrammarKind(StrEnum):
    """The source languages xgrammar compiles directly."""

    JSON_SCHEMA = "json_schema"
    EBNF = "ebnf"
    REGEX = "regex"


@dataclass(frozen=True)
class CompileOptions:
    """Options of ``GrammarCompiler.compile_json_schema``; ignored for EBNF and regex.

    Defaults differ from xgrammar's on purpose: ``any_whitespace=False`` compiles real-world
    schemas about 10x faster and keeps a small model from looping on whitespace. See the README.
    """

    any_whitespace: bool = False
    strict_mode: bool = True
    indent: int | None = None
    separators: tuple[str, str] | None = None
    max_whitespace_cnt: int | None = None

    def __post_init__(self) -> None:
        if self.indent is not None and not 0 <= self.indent <= 16:
            raise InvalidInput(f"indent must be between 0 and 16, got {self.indent}")
        if self.max_whitespace_cnt is not None and self.max_whitespace_cnt < 1:
            raise InvalidInput(
                f"max_whitespace_cnt must be a positive integer, got {self.max_whitespace_cnt}"
            )
        if self.separators is not None:
            if len(self.separators) != 2 or not all(isinstance(s, str) for s in self.separators):
                raise InvalidInput(f"separators must be two strings, got {self.separators!r}")
            object.__setattr__(self, "separators", tuple(self.separators))

    def to_dict(self) -> dict[str, Any]:
        """The options as JSON-ready values."""
        out = dataclasses.asdict(self)
        out["separators"] = list(self.separators) if self.separators else None
        return out


#: Options by preset. ``xgrammar`` is xgrammar's own defaults; ``vllm`` and ``sglang`` are what
#: those engines pass by default (both call ``compile_json_schema(schema, any_whitespace=True)``
#: unless started with ``disable_any_whitespace`` / ``--constrained-json-disable-any-whitespace``,
#: and leave the other options at xgrammar's defaults); ``maskscope`` is ours (see the README).
PRESETS: dict[str, CompileOptions] = {
    "maskscope": CompileOptions(),
    "xgrammar": CompileOptions(any_whitespace=True),
    "vllm": CompileOptions(any_whitespace=True),
    "sglang": CompileOptions(any_whitespace=True),
}


@dataclass(frozen=True)
class GrammarSpec:
    """A grammar request: the kind of source, the source text, and compile options."""

    kind: GrammarKind
    source: str
    options: CompileOptions = field(default_factory=CompileOptions)

    @property
    def is_json(self) -> bool:
        """Whether the output is JSON, so that depth and path mean something."""
        return self.kind is GrammarKind.JSON_SCHEMA

    def cache_key(self) -> str:
        """A canonical string naming this request (the tokenizer is added by the compiler)."""
        return json.dumps([self.kind.value, self.source, self.options.to_dict()], sort_keys=True)


@dataclass(frozen=True)
class CompileResult:
    """A compiled grammar with everything the playground shows about it.

    Attributes:
        spec: what was compiled.
        compiled: the ``xgrammar.CompiledGrammar`` that matchers are built from.
        grammar_text: the grammar as xgrammar prints it (EBNF, after its own rewriting).
        rule_names: rule names by rule id, to name the parser's active states.
        warnings: lines xgrammar printed while compiling, e.g. an ignored ``multipleOf``.
        compile_ms: wall time of the compile in its worker process.
        size_bytes: memory xgrammar reports for the compiled grammar.
        cached: True when this answer came from the cache (the figures are the original ones).
    """

    spec: GrammarSpec
    compiled: Any
    grammar_text: str
    rule_names: tuple[str, ...]
    warnings: tuple[str, ...]
    compile_ms: float
    size_bytes: int
    cached: bool = False
