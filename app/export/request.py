"""What an export needs: the grammar as compiled, its effective options, the prompt, sampling."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from app.engine.grammars.spec import CompileOptions, GrammarKind
from app.engine.grammars.tools.base import ToolsRequest

__all__ = ["ExportRequest", "Message", "PydanticSource", "Sampling", "ToolsExport"]


@dataclass(frozen=True)
class Message:
    """One chat message, as the model saw it (the schema appended when the session asked)."""

    role: str
    content: str


@dataclass(frozen=True)
class PydanticSource:
    """A Pydantic source as the sandbox ran it, and the model whose JSON Schema Maskscope compiled.

    Attributes:
        source: the source the sandbox ran, its methods removed (validators can hold any code:
            a default argument runs when the ``def`` does), never the text as submitted.
        root: the root model's name.
        stripped: the methods removed, e.g. ``"Answer.check (@field_validator)"``.
    """

    source: str
    root: str
    stripped: tuple[str, ...] = ()


@dataclass(frozen=True)
class Sampling:
    """Greedy (temperature 0) or temperature/top-p; ``seed`` is None when none was fixed."""

    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        """Whether the most probable allowed token is always taken."""
        return self.temperature == 0.0


@dataclass(frozen=True)
class ToolsExport:
    """A ``tools`` source: the request its builder was given and what it built.

    Attributes:
        request: the source's fields (each tool's ``parameters`` a JSON Schema).
        tag: the structural tag the builder built (``result.tools.tag``), or None: it built
            none, or it is not known.
        reason: the builder's reason for building none, when it says one.
        stack_reasoning: the session's ``reasoning`` setting (``none``, ``mask_after_end``,
            ``mask_everywhere``), None when the session names none.
        builder_versions: the libraries that built the tag (``{"vllm": "0.32.0", "xgrammar":
            "0.2.8"}``), empty when not known.
    """

    request: ToolsRequest
    tag: Any = None
    reason: str | None = None
    stack_reasoning: str | None = None
    builder_versions: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ExportRequest:
    """Everything a snippet reproduces.

    Attributes:
        kind: the grammar kind xgrammar compiled (a Pydantic source compiles as JSON Schema).
        source: the schema (JSON text), EBNF grammar or regex, as compiled.
        schema: the parsed JSON Schema for JSON kinds, else None.
        options: the effective compile options (the preset with explicit options applied).
        preset: the preset the options started from.
        model: the model name a server serves or a hub id (``HuggingFaceTB/SmolLM2-135M-Instruct``).
        messages: the chat messages; empty with a raw prompt or when no prompt was given.
        raw_prompt: text sent with no chat template, or None.
        prompt_text: the prompt as the chat template rendered it (for APIs that take text).
        sampling: temperature, top-p and seed.
        max_tokens: the most tokens to generate.
        pydantic: the Pydantic source when the schema came from one.
        vllm_fallback: why vLLM's ``auto`` backend would not give this schema to xgrammar (the
            Doctor's vLLM verdict), when it would not.
        vllm_guidance_error: with a fallback, llguidance's error for the schema compiled as
            vLLM's guidance backend does ("" when it compiles; None when not checked).
        vllm_outlines: with a fallback, whether ``auto`` goes to outlines (``patternProperties``
            rules out guidance), which Maskscope does not reproduce.
        legacy_tag: a structural tag given in the legacy ``{"structures", "triggers"}`` form,
            as given (``source`` holds it converted): vLLM's guidance backend and llguidance
            take only this form.
        tools: for a ``tools`` source, its request and the tag built (``kind`` is then
            ``structural_tag`` and ``source`` that tag, or ``null`` when none was built).
        refusals: ``(stack, message)`` for each serving stack whose Doctor row ``refuses`` the
            schema (``sglang``, ``openai``): its targets give that message, never a request.
    """

    kind: GrammarKind
    source: str
    schema: Any
    options: CompileOptions
    preset: str
    model: str
    messages: tuple[Message, ...] = ()
    raw_prompt: str | None = None
    prompt_text: str | None = None
    sampling: Sampling = field(default_factory=Sampling)
    max_tokens: int = 256
    pydantic: PydanticSource | None = None
    vllm_fallback: str | None = None
    vllm_guidance_error: str | None = None
    vllm_outlines: bool = False
    legacy_tag: Any = None
    tools: ToolsExport | None = None
    refusals: tuple[tuple[str, str], ...] = ()

    def refusal(self, stack: str) -> str | None:
        """The Doctor's message when its row for ``stack`` refuses the schema, else None."""
        return next((message for name, message in self.refusals if name == stack), None)

    @property
    def tag(self) -> Any:
        """The structural tag as an object (current form: a legacy tag comes converted), or
        None for other kinds and for a tools source that built none."""
        return json.loads(self.source) if self.kind is GrammarKind.STRUCTURAL_TAG else None

    @property
    def is_json(self) -> bool:
        """Whether the grammar is a JSON Schema (compile options apply)."""
        return self.kind is GrammarKind.JSON_SCHEMA

    def chat(self) -> list[dict[str, str]]:
        """The messages as the OpenAI API takes them."""
        return [{"role": m.role, "content": m.content} for m in self.messages]
