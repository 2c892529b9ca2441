"""What a user asks to compile, and what the compile produced (grammar text, warnings, stats)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from app.engine.grammars.tools.base import ToolsBuild
from app.exceptions import InvalidInput
from app.vocabulary import (
    GrammarKind,
    LibraryName,
    MaskingLibrary,
    Preset,
    PresetName,
    SourceKind,
    SourceKindName,
)

__all__ = [
    "PRESETS",
    "CompileOptions",
    "CompileResult",
    "GrammarKind",
    "GrammarSpec",
    "LibraryName",
    "MaskingLibrary",
    "Preset",
    "PresetName",
    "SourceKind",
    "SourceKindName",
    "presets",
]


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
    Preset.MASKSCOPE.value: CompileOptions(),
    Preset.XGRAMMAR.value: CompileOptions(any_whitespace=True),
    Preset.VLLM.value: CompileOptions(any_whitespace=True),
    Preset.SGLANG.value: CompileOptions(any_whitespace=True),
}

#: Options by preset when llguidance masks. vLLM's guidance backend
#: (``vllm/v1/structured_output/backend_guidance.py``, 0.32.0) passes only
#: ``whitespace_flexible = not disable_any_whitespace`` and leaves ``additionalProperties`` as the
#: schema has it (``disable_additional_properties`` is off by default); SGLang's llguidance
#: backend (0.5.23) passes ``whitespace_flexible = any_whitespace`` (on by default). Neither sets
#: separators, so llguidance's own ``,`` and ``:`` apply: ``any_whitespace`` gives those too.
_LLGUIDANCE_PRESETS: dict[str, CompileOptions] = {
    **PRESETS,
    Preset.VLLM.value: CompileOptions(any_whitespace=True, strict_mode=False),
    Preset.SGLANG.value: CompileOptions(any_whitespace=True, strict_mode=False),
}


def presets(library: MaskingLibrary = MaskingLibrary.XGRAMMAR) -> dict[str, CompileOptions]:
    """The options each preset names when ``library`` masks."""
    return _LLGUIDANCE_PRESETS if library is MaskingLibrary.LLGUIDANCE else PRESETS


@dataclass(frozen=True)
class GrammarSpec:
    """A grammar request: the kind of source, the source text, compile options, and the library
    that masks."""

    kind: GrammarKind
    source: str
    options: CompileOptions = field(default_factory=CompileOptions)
    library: MaskingLibrary = MaskingLibrary.XGRAMMAR

    @property
    def is_json(self) -> bool:
        """Whether the output is JSON, so that depth and path mean something."""
        return self.kind is GrammarKind.JSON_SCHEMA

    def cache_key(self) -> str:
        """A canonical string naming this request (the tokenizer is added by the compiler)."""
        key = [self.kind.value, self.source, self.options.to_dict(), self.library.value]
        return json.dumps(key, sort_keys=True)


@dataclass(frozen=True)
class CompileResult:
    """A compiled grammar with everything the playground shows about it.

    Attributes:
        spec: what was compiled.
        compiled: what matchers are built from: an ``xgrammar.CompiledGrammar``, or for
            llguidance an :class:`app.engine.grammars.llguidance.LlguidanceGrammar`.
        grammar_text: the grammar as the library holds it (xgrammar: its EBNF after its own
            rewriting; llguidance: its serialized grammar).
        rule_names: rule names by rule id, to name the parser's active states (empty for
            llguidance, which exposes none).
        warnings: lines the library reported while compiling, e.g. an ignored ``multipleOf``.
        compile_ms: wall time of the compile (llguidance: until its first mask).
        size_bytes: memory xgrammar reports for the compiled grammar; for llguidance, the size of
            its serialized grammar (it reports no memory figure).
        not_carried: the options the library has no equivalent for (llguidance), or that a
            structural tag does not take (all of them).
        cached: True when this answer came from the cache (the figures are the original ones).
        tools: for a ``tools`` source, what its builder made (the tag compiled, or none).
        unconstrained: for a ``tools`` source, what the tag leaves free, in plain words (read
            from the tag, never from the builder).
    """

    spec: GrammarSpec
    compiled: Any
    grammar_text: str
    rule_names: tuple[str, ...]
    warnings: tuple[str, ...]
    compile_ms: float
    size_bytes: int
    not_carried: tuple[str, ...] = ()
    cached: bool = False
    tools: ToolsBuild | None = None
    unconstrained: tuple[str, ...] = ()
