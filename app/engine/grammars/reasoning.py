"""The reasoning boundary as a serving stack applies it: where the mask starts to apply.

``reasoning`` (a session's and a replay's setting) says what the *stack* does, while a ``tools``
source's ``reasoning`` says what the tag *builder* was told:

- ``none``: the grammar applies from token 0, as built (Maskscope's behaviour before this).
- ``mask_after_end``: no mask until the reasoning's end marker (vLLM's default with a reasoning
  parser, ``enable_in_reasoning`` false). Those steps are recorded ``masked: false``.
- ``mask_everywhere``: the grammar from token 0 (vLLM's ``enable_in_reasoning=true``; for the
  xgrammar builder, its reasoning-aware tag). The matcher runs exactly as under ``none``.

The boundary is found in the *text* (the bytes of the tokens generated so far), never by token
id: the default model spells ``</think>`` in pieces (``</``, ``think``, ``>``) and has tokens such
as ``></`` that straddle it. What the matcher is fed at the boundary:

- an explicit end marker (``</think>``) belongs to the reasoning: the bytes *after* it in the
  token that completes it are fed to the grammar (one matcher step); when the grammar refuses
  them, the step is a ``rejected`` stop as usual;
- an implicit end (a tool-call start that ends the reasoning, as vLLM's ``k2_horizon``,
  ``gemma4`` and ``mistral`` parsers do) is content: the marker's own bytes, from where it
  starts, are fed to the grammar, with whatever follows it in that token.

When the tag itself opens with a reasoning block (xgrammar's reasoning-aware tags), the matcher
is first fed that block empty (its begin and end strings, e.g. ``</think>`` alone), so that the
grammar stands after the reasoning, as if built without it; then the content. Both go in one
matcher step at the token that completes the marker.

The step that completes a marker is itself unmasked (its mask was computed while reasoning);
the next step is masked. A prompt whose text already closed the reasoning (the end marker after
the last reasoning begin, e.g. a template rendering ``<think>\\n\\n</think>``) is masked from token
0, as vLLM's ``is_reasoning_end(prompt_token_ids)`` decides.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from app.engine.grammars.spec import CompileResult, GrammarKind
from app.engine.grammars.tools.compile import tag_source
from app.exceptions import InvalidInput
from app.vocabulary import REASONING_HELP, ReasoningMode, ReasoningName

__all__ = [
    "REASONING_HELP",
    "Boundary",
    "EndMarker",
    "ReasoningGate",
    "ReasoningMode",
    "ReasoningName",
    "end_markers",
    "leading_reasoning",
    "no_marker_advice",
    "reasoning_end",
    "tag_of",
]


@dataclass(frozen=True, slots=True)
class EndMarker:
    """A string that ends the reasoning.

    Attributes:
        text: the marker as text (``</think>``).
        content: whether the marker is also content (an implicit end on a tool-call start): its
            bytes go to the grammar; an explicit end marker's do not.
    """

    text: str
    content: bool = False


@dataclass(frozen=True, slots=True)
class Boundary:
    """Where the reasoning ended in the output.

    Attributes:
        start: byte offset of the marker in the output.
        end: byte offset just past the marker.
        marker: the marker found.
    """

    start: int
    end: int
    marker: EndMarker

    @property
    def content_from(self) -> int:
        """The byte offset from which the output is content (fed to the grammar)."""
        return self.start if self.marker.content else self.end


def tag_of(result: CompileResult) -> dict[str, Any] | None:
    """The structural tag a compiled grammar masks with (``{"type": "structural_tag",
    "format": ...}``), or None for a grammar that is not a tag."""
    if result.tools is not None:  # what its builder built (any text when it built none)
        tag: dict[str, Any] = json.loads(tag_source(result.tools))
        return tag
    if result.spec.kind is GrammarKind.STRUCTURAL_TAG:
        return _parsed_tag(result.spec.source)
    return None


@functools.lru_cache(maxsize=64)
def _parsed_tag_json(source: str) -> str:
    from app.engine.grammars.structural_tag import parse_tag

    return parse_tag(source).tag_json


def _parsed_tag(source: str) -> dict[str, Any]:
    tag: dict[str, Any] = json.loads(_parsed_tag_json(source))
    return tag


def reasoning_end(result: CompileResult) -> str | None:
    """The marker that ends the reasoning for this grammar, or None when it has none.

    Read from the tag as built: the end of its leading reasoning block (xgrammar's
    reasoning-aware tags: ``get_model_structural_tag(..., reasoning="enabled"|"auto")``); for a
    ``tools`` source, the builder's (vLLM's is its reasoning parser's end marker).
    """
    if result.tools is not None:  # the builder's: vLLM's reasoning parser, or xgrammar's tag
        return result.tools.reasoning_end
    tag = tag_of(result)
    if tag is None:
        return None
    block = leading_reasoning(tag.get("format"))
    return None if block is None else _marker_text(block.get("end"))


def end_markers(result: CompileResult) -> tuple[EndMarker, ...]:
    """Every marker that ends the reasoning for this grammar: the explicit end marker, and the
    implicit ones (a tool-call start that is content), once a builder reports them."""
    end = reasoning_end(result)
    return () if end is None else (EndMarker(end),)


def leading_reasoning(fmt: Any) -> dict[str, Any] | None:
    """The tag that opens ``fmt`` as a reasoning block (free text up to an end marker), or None.

    xgrammar writes it as the first element of a sequence, possibly optional (``auto``) and
    followed by a constant suffix (``"\\n\\n"``).
    """
    while isinstance(fmt, dict):
        kind = fmt.get("type")
        if kind == "sequence" and fmt.get("elements"):
            fmt = fmt["elements"][0]
        elif kind == "optional":
            fmt = fmt.get("content")
        elif kind == "tag":
            content = fmt.get("content") or {}
            if content.get("type") in ("any_text", "any_tokens") and _marker_text(fmt.get("end")):
                return fmt
            return None
        else:
            return None
    return None


def _marker_text(end: Any) -> str | None:
    if isinstance(end, list):
        end = end[0] if len(end) == 1 else None
    if isinstance(end, dict) and isinstance(end.get("token"), str):  # a TokenFormat end
        end = end["token"]
    return end if isinstance(end, str) and end else None


def _begin_text(block: dict[str, Any] | None) -> str:
    begin = None if block is None else block.get("begin")
    if isinstance(begin, dict):
        begin = begin.get("token")
    return begin if isinstance(begin, str) else ""


class ReasoningGate:
    """Decides, from the output so far, whether a step is masked and what the matcher is fed.

    Args:
        mode: the stack's reasoning setting.
        markers: the end markers (see :func:`end_markers`).
        prompt: the prompt's text (a template may already have closed the reasoning).
        begin: the reasoning's begin marker, if known (``<think>``), to read the prompt.
        skeleton: what the matcher is fed before the content when the tag has a reasoning block
            of its own: the block, empty (its begin and end strings).
        advice: what to set when there is no end marker (:func:`no_marker_advice`).

    Raises:
        InvalidInput: ``mask_after_end`` with no end marker to wait for.
    """

    def __init__(
        self,
        mode: ReasoningMode,
        markers: tuple[EndMarker, ...] = (),
        prompt: str = "",
        begin: str = "",
        skeleton: str = "",
        *,
        advice: str = "",
    ) -> None:
        if mode is ReasoningMode.MASK_AFTER_END and not markers:
            raise InvalidInput(_NO_MARKER + (advice or _TAG_ADVICE), pointer="/reasoning")
        self.mode = mode
        self.markers = markers
        self._encoded = tuple((m, m.text.encode()) for m in markers)
        self.skeleton = skeleton.encode()
        #: whether the prompt already closed the reasoning: the mask applies from token 0
        self.closed_in_prompt = mode is ReasoningMode.MASK_AFTER_END and _closed(
            prompt, markers, begin
        )

    @classmethod
    def for_grammar(
        cls, mode: ReasoningMode, result: CompileResult, prompt: str = ""
    ) -> ReasoningGate:
        """The gate for a compiled grammar, its markers read from the tag."""
        if mode is not ReasoningMode.MASK_AFTER_END:
            return cls(mode)
        tag = tag_of(result)
        block = leading_reasoning(tag.get("format")) if tag else None
        begin = _begin_text(block)
        skeleton = begin + (_marker_text(block.get("end")) or "") if block else ""
        markers = end_markers(result)
        advice = "" if markers else no_marker_advice(result)
        return cls(mode, markers, prompt, begin, skeleton, advice=advice)

    @property
    def gates(self) -> bool:
        """Whether any step can be unmasked."""
        return self.mode is ReasoningMode.MASK_AFTER_END and not self.closed_in_prompt

    def boundary(self, output: bytes) -> Boundary | None:
        """The first end of the reasoning in ``output`` (the generated bytes), or None."""
        found: Boundary | None = None
        for marker, data in self._encoded:
            at = output.find(data)
            if at >= 0 and (found is None or at + len(data) < found.end):
                found = Boundary(at, at + len(data), marker)
        return found

    def open_before(self, output: bytes) -> bool:
        """Whether the reasoning is still open after ``output``: the next step is unmasked."""
        return self.gates and self.boundary(output) is None

    def content(self, output: bytes) -> bytes | None:
        """What the grammar reads of ``output``: the skeleton and the content after the
        boundary; None while the reasoning is open (nothing). Without ``mask_after_end``, all
        of it; when the prompt closed the reasoning, the skeleton and all of it."""
        if self.mode is not ReasoningMode.MASK_AFTER_END:
            return output
        if self.closed_in_prompt:
            return self.skeleton + output
        found = self.boundary(output)
        if found is None:
            return None
        return self.skeleton + output[found.content_from :]

    def fed_after(self, output: bytes, token: bytes) -> bytes | None:
        """For an unmasked step taking ``token`` after ``output``: the bytes the matcher is fed
        (see :meth:`content`), or None when the reasoning goes on."""
        return self.content(output + token)


_NO_MARKER = "reasoning mask_after_end needs an end marker, and this grammar has none: "
_TAG_ADVICE = (
    "a structural tag gives one with a leading reasoning block (e.g. xgrammar's "
    'get_model_structural_tag(..., reasoning="enabled")), or pick none'
)


def no_marker_advice(result: CompileResult) -> str:
    """What gives a grammar with no reasoning end marker one, for the builder in use: vLLM's
    builder takes it from the server's ``--reasoning-parser`` (the tools source's
    ``reasoning_parser``), never from xgrammar's reasoning setting; xgrammar's builder from its
    reasoning mode; a pasted tag from a leading reasoning block."""
    if result.tools is None:
        return _TAG_ADVICE
    try:
        builder = json.loads(result.spec.source).get("builder")
    except (ValueError, AttributeError):
        builder = None
    if builder == "vllm":
        return (
            "vLLM's builder ends the reasoning where the server's --reasoning-parser does: set "
            "reasoning_parser (the serve flag) to the model's reasoning parser, or pick none"
        )
    return (
        "xgrammar's builder adds a reasoning block when it is told reasoning enabled: set "
        "reasoning to enabled, or pick none"
    )


def _closed(prompt: str, markers: tuple[EndMarker, ...], begin: str) -> bool:
    """Whether the prompt already closed the reasoning: its last end marker comes after its last
    begin marker."""
    found = [(prompt.rfind(m.text), m.text) for m in markers if not m.content]
    last_end, text = max(found, default=(-1, ""))
    if last_end < 0:
        return False
    if begin:
        return prompt.rfind(begin) < last_end
    # No begin marker to look for (the tag continues an opener the prompt wrote): the prompt
    # closed the reasoning when nothing but whitespace follows its last end marker.
    return not prompt[last_end + len(text) :].strip()
