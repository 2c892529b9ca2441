"""The names a request, the CLI and the page share: grammar kinds, masking libraries, presets.

Spelled once here, in a module that imports nothing heavy, so that the command line can offer them
as choices without loading the engine; :mod:`app.engine.grammars.spec` re-exports them.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Literal

__all__ = [
    "GrammarKind",
    "LibraryName",
    "MaskingLibrary",
    "Preset",
    "PresetName",
    "REASONING_HELP",
    "ReasoningMode",
    "ReasoningName",
    "SourceKind",
    "SourceKindName",
]


class GrammarKind(StrEnum):
    """The sources the engine compiles: those xgrammar compiles directly, and tools (compiled
    as the structural tag their builder makes)."""

    JSON_SCHEMA = "json_schema"
    EBNF = "ebnf"
    REGEX = "regex"
    STRUCTURAL_TAG = "structural_tag"
    TOOLS = "tools"


class ReasoningMode(StrEnum):
    """What the serving stack does while the model reasons (a session's or replay's
    ``reasoning``)."""

    NONE = "none"
    MASK_AFTER_END = "mask_after_end"
    MASK_EVERYWHERE = "mask_everywhere"


ReasoningName = Literal["none", "mask_after_end", "mask_everywhere"]

#: The request field's description (OpenAPI, the CLI).
REASONING_HELP = (
    "what the serving stack does while the model reasons: none (the grammar from token 0, as "
    "built), mask_after_end (no mask until the reasoning's end marker: vLLM's default with a "
    "reasoning parser), mask_everywhere (the grammar from token 0: vLLM's enable_in_reasoning)"
)


class SourceKind(StrEnum):
    """What a user may write a grammar in (the grammar request's ``kind``): the
    :class:`GrammarKind` sources, and a Pydantic model, compiled as the JSON Schema it derives."""

    JSON_SCHEMA = "json_schema"
    PYDANTIC = "pydantic"
    EBNF = "ebnf"
    REGEX = "regex"
    STRUCTURAL_TAG = "structural_tag"
    TOOLS = "tools"
    REQUEST = "request"

    @property
    def label(self) -> str:
        """The kind's name on the page's tabs."""
        return _SOURCE_KIND_LABELS[self]

    @property
    def on_page(self) -> bool:
        """Whether the page has a tab for the kind (a structural tag's tab is where the Tools
        tab opens the tag it built; a pasted request is the API's and the CLI's for now)."""
        return self is not SourceKind.REQUEST


_SOURCE_KIND_LABELS = {
    SourceKind.JSON_SCHEMA: "JSON",
    SourceKind.PYDANTIC: "Pydantic",
    SourceKind.EBNF: "EBNF",
    SourceKind.REGEX: "Regex",
    SourceKind.STRUCTURAL_TAG: "Structural tag",
    SourceKind.TOOLS: "Tools",
    SourceKind.REQUEST: "Request",
}


class MaskingLibrary(StrEnum):
    """The libraries that can compute the mask (the grammar request's ``engine``)."""

    XGRAMMAR = "xgrammar"
    LLGUIDANCE = "llguidance"


class Preset(StrEnum):
    """The compile options a serving engine passes by default (the options' ``preset``)."""

    MASKSCOPE = "maskscope"
    XGRAMMAR = "xgrammar"
    VLLM = "vllm"
    SGLANG = "sglang"

    @property
    def label(self) -> str:
        """The preset's name on the page."""
        return _PRESET_LABELS[self]


_PRESET_LABELS = {
    Preset.MASKSCOPE: "Maskscope (compact JSON)",
    Preset.XGRAMMAR: "xgrammar defaults",
    Preset.VLLM: "vLLM default",
    Preset.SGLANG: "SGLang default",
}

# The names as plain-string ``Literal`` types, for request bodies: Pydantic then validates and
# documents them exactly as the hand-written ``Literal`` lists did (inline ``enum``, plain ``str``
# values), where an enum-typed field would become a ``$ref`` in OpenAPI. mypy cannot read a
# ``Literal`` built at run time, so it sees ``str``.
if TYPE_CHECKING:
    SourceKindName = str
    LibraryName = str
    PresetName = str
else:
    SourceKindName = Literal[tuple(kind.value for kind in SourceKind)]
    LibraryName = Literal[tuple(library.value for library in MaskingLibrary)]
    PresetName = Literal[tuple(preset.value for preset in Preset)]
