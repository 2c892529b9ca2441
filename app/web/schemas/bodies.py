"""Request bodies of the JSON API, with the caps declared where OpenAPI (and fuzzers) see them."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from app.caps import (
    MAX_ACTIONS,
    MAX_DRAFT_TOKENS,
    MAX_LOG_LINE,
    MAX_MESSAGES_BYTES,
    MAX_REPLAY_TOKENS,
    MAX_SEED,
    MAX_SOURCE_BYTES,
    MAX_TOKENS,
    MAX_TOP_K,
)
from app.doctor import DEFAULT_BUDGET_MS, MAX_BUDGET_MS
from app.engine import (
    ChatMessage,
    CompileOptions,
    GrammarKind,
    GrammarSpec,
    LibraryName,
    MaskingLibrary,
    PresetName,
    SourceKindName,
    presets,
    with_schema,
)
from app.engine.grammars.reasoning import REASONING_HELP, ReasoningName
from app.engine.grammars.request import DerivedRequest
from app.engine.stack_pins import MASKSCOPE, NAME_PATTERN
from app.engine.stepper.stops import MAX_STOP_CHARS, MAX_STOP_STRINGS, EndRules
from app.engine.vllm_log import parse_log_line
from app.exceptions import InvalidInput
from app.settings import LOCAL_MODEL_ID, Settings
from app.web.schemas.body_parts import (
    ActionIn,
    Compare,
    CountIn,
    ForceIn,
    ModelId,
    OpenPermalinkIn,
    SchemaTestIn,
    SchemaTests,
    Separator,
    Strict,
    Text,
    TokenId,
    check_test_sizes,
)
from app.web.schemas.instruments import MAX_BREAKPOINTS, BreakpointIn

__all__ = [
    "ActionIn",
    "CompileIn",
    "CountIn",
    "DiffIn",
    "DoctorIn",
    "EndIn",
    "ForceIn",
    "GrammarIn",
    "MessageIn",
    "ModelId",
    "OpenPermalinkIn",
    "OptionsIn",
    "PermalinkIn",
    "ReplayIn",
    "SamplingIn",
    "SchemaTestIn",
    "SchemaTestsIn",
    "SessionIn",
    "check_test_sizes",
]


class OptionsIn(Strict):
    """Compile options: a preset, then explicit options that override it."""

    preset: PresetName = Field(
        default="maskscope",
        description="options a serving engine passes to xgrammar by default; "
        "`maskscope` is any_whitespace=false",
    )
    any_whitespace: bool | None = None
    strict_mode: bool | None = None
    indent: int | None = Field(default=None, ge=0, le=16)
    separators: tuple[Separator, Separator] | None = None
    max_whitespace_cnt: int | None = Field(default=None, ge=1, le=1024)
    root_model: str | None = Field(default=None, max_length=200)

    def effective(self, engine: LibraryName = "xgrammar") -> CompileOptions:
        """The preset's options (as they are when ``engine`` masks) with the explicit ones
        applied."""
        overrides = {
            name: value
            for name in ("any_whitespace", "strict_mode", "indent", "separators")
            if (value := getattr(self, name)) is not None
        }
        if self.max_whitespace_cnt is not None:
            overrides["max_whitespace_cnt"] = self.max_whitespace_cnt
        return dataclasses.replace(presets(MaskingLibrary(engine))[self.preset], **overrides)

    def echo(self, engine: LibraryName = "xgrammar") -> dict[str, Any]:
        """The effective options as the API returns them."""
        effective = self.effective(engine).to_dict()
        return {"preset": self.preset, **effective, "root_model": self.root_model}


class GrammarIn(Strict):
    """A grammar request: what to compile and how."""

    kind: SourceKindName
    source: Text = Field(max_length=MAX_SOURCE_BYTES)
    options: OptionsIn = Field(default_factory=OptionsIn)
    engine: LibraryName = Field(
        default="xgrammar", description="the library that computes the mask"
    )

    def check_size(self, settings: Settings) -> None:
        """Refuse a source above the settings' size limit."""
        size = len(self.source.encode("utf-8"))
        if size > settings.source_max_bytes:
            raise InvalidInput(
                f"the source is {size} bytes; the limit is {settings.source_max_bytes}",
                pointer="/grammar/source",
            )

    def to_spec(
        self, json_schema: str | None = None, request: DerivedRequest | None = None
    ) -> GrammarSpec:
        """The engine's grammar spec; a Pydantic source compiles as its derived ``json_schema``,
        a tools source as ``json_schema`` when given (the source with its ``$model`` derived), a
        request source as the grammar its stack derived (``request``)."""
        options, library = self.options.effective(self.engine), MaskingLibrary(self.engine)
        if self.kind == "pydantic":
            assert json_schema is not None
            return GrammarSpec(GrammarKind.JSON_SCHEMA, json_schema, options, library)
        kind, source = self.kind, self.source
        if kind == "request":
            assert request is not None
            kind, source = request.kind.value, request.source
        if kind in ("structural_tag", "tools"):  # no options: one cache entry whatever
            options = CompileOptions()
            source = json_schema if json_schema is not None else source
        return GrammarSpec(GrammarKind(kind), source, options, library)


class CompileIn(GrammarIn):
    """``POST /api/compile``: a grammar request, compiled for one model's tokenizer."""

    model: ModelId = LOCAL_MODEL_ID


class MessageIn(Strict):
    """One chat message."""

    role: Literal["system", "user", "assistant"]
    content: Text = Field(max_length=MAX_MESSAGES_BYTES)


class SamplingIn(Strict):
    """Greedy (temperature 0, the default) or temperature/top-p with a seed."""

    temperature: float = Field(default=0.0, ge=0.0, le=10.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    seed: int | None = Field(
        default=None, ge=0, le=MAX_SEED, description="null: a random seed, echoed back"
    )


class EndIn(Strict):
    """The end of generation as vLLM's ``SamplingParams`` takes it (docs/end-of-generation.md)."""

    min_tokens: int = Field(
        default=0, ge=0, le=MAX_TOKENS, description="stop ids are masked until this many tokens"
    )
    stop_token_ids: list[TokenId] = Field(
        default_factory=list, max_length=MAX_STOP_STRINGS, description="ids that also end it"
    )
    stop: list[Annotated[str, Field(min_length=1, max_length=MAX_STOP_CHARS)]] = Field(
        default_factory=list, max_length=MAX_STOP_STRINGS, description="strings that end it"
    )

    def end_rules(self) -> EndRules | None:
        """The rules, or None when none is set (the answer then has no ``end``)."""
        rules = EndRules(self.min_tokens, tuple(self.stop_token_ids), tuple(self.stop))
        return rules if rules.active else None


class SessionIn(EndIn):
    """A session request: grammar, prompt, sampling and limits."""

    grammar: GrammarIn
    messages: list[MessageIn] = Field(default_factory=list, max_length=64)
    raw_prompt: Text | None = Field(default=None, max_length=MAX_MESSAGES_BYTES)
    schema_in_prompt: bool = Field(
        default=False, description="append the JSON Schema to the system message"
    )
    sampling: SamplingIn = Field(default_factory=SamplingIn)
    max_tokens: int = Field(default=256, ge=1, le=MAX_TOKENS)
    top_k: int = Field(default=10, ge=1, le=MAX_TOP_K)
    model: ModelId = LOCAL_MODEL_ID
    compare: Compare = None
    draft_tokens: int = Field(default=0, ge=0, le=MAX_DRAFT_TOKENS)
    reasoning: ReasoningName = Field(default="none", description=REASONING_HELP)
    breakpoints: list[BreakpointIn] = Field(default_factory=list, max_length=MAX_BREAKPOINTS)

    def prompt_bytes(self) -> int:
        """The size of the prompt as sent: every message and the raw prompt, in UTF-8."""
        size = sum(len(m.content.encode("utf-8")) for m in self.messages)
        return size + len((self.raw_prompt or "").encode("utf-8"))

    @model_validator(mode="after")
    def _prompt_size(self) -> SessionIn:
        size = self.prompt_bytes()
        if size > MAX_MESSAGES_BYTES:
            raise ValueError(
                f"the prompt is {size} bytes in total; the limit is {MAX_MESSAGES_BYTES}"
            )
        return self

    def check_size(self, settings: Settings) -> None:
        """Refuse a source or a prompt above the settings' size limits."""
        self.grammar.check_size(settings)
        size = self.prompt_bytes()
        if size > settings.messages_max_bytes:
            raise InvalidInput(
                f"the prompt is {size} bytes in total; the limit is {settings.messages_max_bytes}",
                pointer="/raw_prompt" if self.raw_prompt else "/messages",
            )

    def chat_messages(self, spec: GrammarSpec) -> list[ChatMessage]:
        """The messages, with the JSON Schema appended to the system message when asked."""
        messages = [ChatMessage(m.role, m.content) for m in self.messages]
        if self.schema_in_prompt and spec.is_json:
            if messages and messages[0].role == "system":
                messages[0] = ChatMessage("system", with_schema(messages[0].content, spec.source))
            else:
                messages.insert(0, ChatMessage("system", with_schema("", spec.source)))
        return messages


class PermalinkIn(SessionIn):
    """A session request, the trace to replay on it, and the schema's unit tests."""

    actions: list[ActionIn] = Field(default_factory=list, max_length=MAX_ACTIONS)
    tests: SchemaTests = Field(
        default_factory=list, description="schema unit tests kept with the link"
    )


class ReplayIn(EndIn):
    """The text, then token ids, then a log line's ids (any of them) walked with no model."""

    grammar: GrammarIn
    model: ModelId = LOCAL_MODEL_ID
    text: Text | None = Field(default=None, max_length=MAX_SOURCE_BYTES)
    token_ids: list[TokenId] | None = Field(default=None, max_length=MAX_REPLAY_TOKENS)
    log: Text | None = Field(default=None, max_length=MAX_LOG_LINE, description="a vLLM log line")
    bitmask_for: list[Annotated[int, Field(ge=0, le=MAX_REPLAY_TOKENS - 1)]] = Field(
        default_factory=list, max_length=64, description="the token indices whose bitmask is kept"
    )
    compare: Compare = None
    reasoning: ReasoningName = Field(default="none", description=REASONING_HELP)
    stack: str = Field(
        default=MASKSCOPE,
        pattern=f"^{NAME_PATTERN}$",
        description="the serving stack whose own code masks each step (GET /api/stacks)",
    )

    @model_validator(mode="after")
    def _some_input(self) -> ReplayIn:
        if self.log is not None:  # InvalidInput (422, pointer /log) when no message is found
            logged = list(parse_log_line(self.log).token_ids)
            self.token_ids, self.log = (self.token_ids or []) + logged, None
        if self.text is None and self.token_ids is None:
            raise ValueError("give text, token_ids, or both (the text first, then the ids)")
        return self


class DiffIn(Strict):
    """One source under two stacks, and optionally a walk (text, ids, a log line's ids)."""

    grammar: GrammarIn
    model: ModelId = LOCAL_MODEL_ID
    stacks: list[Annotated[str, Field(pattern=f"^{NAME_PATTERN}$")]] = Field(
        min_length=2, max_length=2, description="the two stacks, A then B (GET /api/stacks)"
    )
    text: Text | None = Field(default=None, max_length=MAX_SOURCE_BYTES)
    token_ids: list[TokenId] | None = Field(default=None, max_length=MAX_REPLAY_TOKENS)
    log: Text | None = Field(default=None, max_length=MAX_LOG_LINE, description="a vLLM log line")
    reasoning: ReasoningName = Field(default="none", description=REASONING_HELP)

    @model_validator(mode="after")
    def _log_ids(self) -> DiffIn:
        if self.log is not None:  # InvalidInput (422, pointer /log) when no message is found
            logged = list(parse_log_line(self.log).token_ids)
            self.token_ids, self.log = (self.token_ids or []) + logged, None
        return self


class DoctorIn(Strict):
    """A grammar to examine, with the search's seed and time budget."""

    grammar: GrammarIn
    model: ModelId = LOCAL_MODEL_ID
    seed: int = Field(
        default=0, ge=0, le=MAX_SEED, description="the same seed gives the same witnesses"
    )
    budget_ms: int = Field(
        default=DEFAULT_BUDGET_MS,
        ge=100,
        le=MAX_BUDGET_MS,
        description="each part's wall-clock safety stop (the work is bounded by counts)",
    )
    max_tokens: int | None = Field(
        default=None, ge=1, le=MAX_TOKENS, description="flagged when below the shortest document"
    )


class SchemaTestsIn(Strict):
    """Schema unit tests to run on a grammar."""

    grammar: GrammarIn
    model: ModelId = LOCAL_MODEL_ID
    tests: SchemaTests
