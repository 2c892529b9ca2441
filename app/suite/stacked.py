"""A suite's source as a serving stack takes it: what that release compiles, read from its runner.

Nothing here knows a vLLM rule. Each answer is the stack's own code's, asked through its runner
(:func:`app.engine.stacks.runner`):

- :func:`stack_compile`: a JSON Schema, EBNF, regex or structural tag handed to the release's
  structured-output backend (``xgrammar`` or ``guidance``, by engine) as its ``structured_outputs``
  (the runner's replay of no token: vLLM's own request validation, then ``grammar_init``). A
  refusal is the release's message; otherwise the grammar and the options the backend called its
  library with (``compile_calls``), which Maskscope compiles and the Doctor examines;
- :class:`StackTools`: the release's own tools builder, as an engine's (the web layer's call);
- :func:`examined_grammar`: the engine and grammar the Doctor examines for a release;
- :func:`derive`: a ``request`` source derived by the stack's code (its ``derive`` op);
- :func:`request_locator`: a pointer into a derived grammar, placed where the request file writes
  that part of it.
"""

from __future__ import annotations

import copy
import json
import threading
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.engine import AnyEngine, CompileOptions, GrammarKind, GrammarSpec, MaskingLibrary
from app.engine.grammars.tools.base import BuilderName, ToolFormat, ToolsBuild, ToolsRequest
from app.engine.grammars.tools.compile import ToolsCompiler
from app.exceptions import GrammarError
from app.paths import escape_token, split_pointer
from app.suite.positions import Locator, json_positions, parent_pointers

if TYPE_CHECKING:
    from app.engine.grammars.request import DerivedRequest
    from app.engine.grammars.tools.vllm_builder import VllmBuilder

__all__ = [
    "BACKENDS",
    "StackCompile",
    "StackTools",
    "derive",
    "examined_grammar",
    "request_locator",
    "stack_compile",
    "with_stack_tools",
]

#: The structured-output backend (``--structured-outputs-config``'s ``backend``) each engine is.
BACKENDS = {"xgrammar": "xgrammar", "llguidance": "guidance"}
#: The field of vLLM's ``structured_outputs`` a grammar kind is sent as.
_FIELDS = {
    "json_schema": "json",
    "ebnf": "grammar",
    "regex": "regex",
    "structural_tag": "structural_tag",
}
#: The xgrammar entry point vLLM's xgrammar backend compiles each kind through.
_XGRAMMAR_CALLS = {
    "json_schema": "compile_json_schema",
    "ebnf": "compile_grammar",
    "regex": "compile_regex",
    "structural_tag": "compile_structural_tag",
}
_OPTIONS = ("any_whitespace", "strict_mode", "indent", "separators", "max_whitespace_cnt")


@dataclass(frozen=True)
class StackCompile:
    """What a release's backend compiled: the grammar it handed its library, as Maskscope
    compiles it (the same options), and the library that masks.

    Attributes:
        spec: the grammar as Maskscope compiles it with the stack's options.
        library: who fills the masks there (``{"library", "version"}``).
    """

    spec: GrammarSpec
    library: dict[str, str]


def stack_compile(
    builder: VllmBuilder,
    kind: str,
    text: str,
    engine: str,
    *,
    tokenizer: str,
    vocab_size: int,
    serve: dict[str, Any] | None = None,
) -> StackCompile:
    """``text`` (a grammar of ``kind``) compiled by the release's backend for ``engine``.

    Args:
        builder: the stack's runner.
        kind: ``json_schema``, ``ebnf``, ``regex`` or ``structural_tag``.
        text: the grammar.
        engine: ``xgrammar`` or ``llguidance`` (vLLM's ``guidance`` backend).
        tokenizer: the model's tokenizer (a directory the release loads).
        vocab_size: the model's vocabulary size (the bitmask's width).
        serve: ``--structured-outputs-config`` flags (a request's own); the backend is the
            engine's.

    Raises:
        GrammarError: the release refuses it (its message), or the stack is unavailable.
    """
    value: Any = json.loads(text) if kind == "json_schema" else text
    message = {
        "token_ids": [],
        "vocab_size": vocab_size,
        "structured_outputs": {_FIELDS[kind]: value},
        "structured_outputs_config": {**(serve or {}), "backend": BACKENDS[engine]},
    }
    try:
        answer = builder.replay(message, tokenizer)
    except GrammarError as error:  # its pointer is into the runner's message, not the source
        raise GrammarError(f"{builder.stack.name}: {error.message}") from None
    calls: list[dict[str, Any]] = list(answer.get("compile_calls") or ())
    source, options = (
        _xgrammar_compile(calls, kind, text)
        if engine == "xgrammar"
        else _guidance_compile(calls, kind, text)
    )
    spec = GrammarSpec(GrammarKind(kind), source, options, MaskingLibrary(engine))
    return StackCompile(spec, dict(answer.get("mask_by") or {}))


def _same_json(a: str, b: str) -> bool:
    try:
        return bool(json.loads(a) == json.loads(b))
    except ValueError:
        return False


def _xgrammar_compile(
    calls: list[dict[str, Any]], kind: str, text: str
) -> tuple[str, CompileOptions]:
    """The grammar and options of the backend's last call of its kind's xgrammar entry point."""
    found = [c for c in calls if c.get("call") == _XGRAMMAR_CALLS[kind]]
    if kind == "structural_tag" or not found:  # a tag takes no options
        return text, CompileOptions()
    arguments = dict(found[-1].get("arguments") or {})
    handed = next(iter(arguments.values()), None)
    if kind != "json_schema":
        return (handed if isinstance(handed, str) else text), CompileOptions()
    source = text if not isinstance(handed, str) or _same_json(handed, text) else handed
    chosen = {name: arguments[name] for name in _OPTIONS if name in arguments}
    if chosen.get("separators") is not None:
        chosen["separators"] = tuple(chosen["separators"])
    return source, CompileOptions(**chosen)


def _guidance_compile(
    calls: list[dict[str, Any]], kind: str, text: str
) -> tuple[str, CompileOptions]:
    """The schema the guidance backend serialized for llguidance (its last serialization: the
    compile's, after the validation's), with its ``whitespace_flexible``; the schema is handed
    as written there, so nothing closes it (``strict_mode`` off)."""
    found = [c for c in calls if c.get("call") == "serialize_guidance_grammar"]
    if kind != "json_schema" or not found:
        return text, CompileOptions()
    grammars = json.loads(found[-1]["grammar"]).get("grammars") or [{}]
    schema = dict(grammars[0].get("json_schema") or {})
    guidance = schema.pop("x-guidance", {}) or {}
    flexible = bool(guidance.get("whitespace_flexible", False))
    source = text if _same_json(json.dumps(schema), text) else json.dumps(schema, indent=2)
    return source, CompileOptions(any_whitespace=flexible, strict_mode=False)


class StackTools:
    """A release's own tools builder, as an engine's (:class:`ToolsCompiler`): every ``tools``
    source is built by it; its formats are checked on the request model's tokenizer.

    Args:
        builder: the stack's runner.
        tokenizer: the model's tokenizer.
    """

    name: BuilderName = "vllm"

    def __init__(self, builder: VllmBuilder, tokenizer: str) -> None:
        self._builder, self._tokenizer = builder, tokenizer

    def formats(self) -> list[ToolFormat]:
        """The release's ``--tool-call-parser`` names, checked on the model's tokenizer."""
        return self._builder.formats(tokenizer=self._tokenizer)

    def build(self, request: ToolsRequest, tokenizer: str) -> ToolsBuild:
        """The tag the release's server builds for ``request`` (as the web layer asks it)."""
        return self._builder.build(request, tokenizer)


#: (engine, builder) -> the engine under the builder's tools: one while the engine lives, so
#: what is kept per engine (its build cache, a server's Doctor workers) is made once, not per
#: check. Keyed by identity and dropped with the engine (kept, it would keep every engine a
#: process opened, its tokenizer and compile workers with it).
_STACKED: dict[tuple[int, int], tuple[VllmBuilder, AnyEngine]] = {}
_STACKED_LOCK = threading.Lock()


def with_stack_tools(engine: AnyEngine, builder: VllmBuilder) -> AnyEngine:
    """``engine`` (its model, compilers, shared) whose ``tools`` sources are built by the stack:
    the Doctor examines, and the engine compiles, the tag that release builds (the same object
    for the same pair)."""
    key = (id(engine), id(builder))
    with _STACKED_LOCK:
        found = _STACKED.get(key)
        if found is not None and found[0] is builder:
            return found[1]
        tools = StackTools(builder, engine.tools.tokenizer)
        stacked = copy.copy(engine)
        stacked.tools = ToolsCompiler(engine.tools.tokenizer, builders=lambda _: tools)
        if found is None:  # the builder is held by the entry; the engine's end drops it
            weakref.finalize(engine, _STACKED.pop, key, None)
        _STACKED[key] = (builder, stacked)
        return stacked


def derive(builder: VllmBuilder, text: str, engine: AnyEngine) -> DerivedRequest:
    """A ``request`` source as the stack's server takes it on ``engine``'s tokenizer (the chat
    template the server would be started with, as the compile route picks it).

    Raises:
        GrammarError: the source is invalid, the stack refuses it, or nothing is constrained.
    """
    from app.engine.grammars.request import parse_request
    from app.engine.model.chat_templates import server_template

    parsed = parse_request(text)
    shipped = getattr(getattr(engine.model, "spec", None), "tokenizer", None)
    template = server_template(engine.model.tokens, shipped=shipped)
    return builder.derive(parsed, engine.tools.tokenizer, template)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _index(value: Any, pointer: str, out: dict[str, str]) -> None:
    """Each object and array in ``value`` by its canonical JSON: its first pointer."""
    if isinstance(value, dict):
        out.setdefault(_canonical(value), pointer)
        for key, item in value.items():
            _index(item, f"{pointer}/{escape_token(key)}", out)
    elif isinstance(value, list):
        out.setdefault(_canonical(value), pointer)
        for number, item in enumerate(value):
            _index(item, f"{pointer}/{number}", out)


def _at(value: Any, pointer: str) -> Any:
    for part in split_pointer(pointer):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return value


def request_locator(text: str, derived: DerivedRequest) -> Locator:
    """Where a pointer into ``derived``'s grammar is written in the request file ``text``: the
    nearest part of the grammar (the pointer, else a parent) that the file holds as written,
    found by its value (a response format's schema, a tool's parameters); else the body."""
    positions = json_positions(text)
    written: dict[str, str] = {}
    try:
        _index(json.loads(text), "", written)
        grammar = json.loads(derived.source)
    except ValueError:
        return lambda _: positions.get("/body")

    def locate(pointer: str) -> tuple[int, int] | None:
        for parent in parent_pointers(pointer):
            value = _at(grammar, parent)
            if not isinstance(value, (dict, list)) or _canonical(value) not in written:
                continue
            there = written[_canonical(value)] + pointer[len(parent) :]
            return next((positions[p] for p in parent_pointers(there) if p in positions), None)
        return positions.get("/body")

    return locate


def examined_grammar(
    engine: AnyEngine, builder: VllmBuilder, spec: GrammarSpec, serve: dict[str, Any]
) -> tuple[AnyEngine, GrammarSpec]:
    """The engine and grammar the Doctor examines for the release ``builder`` runs: a ``tools``
    source is built by that release's builder (the engine's tools swapped for it); any other
    grammar is what the release's xgrammar backend compiles, with its options.

    Args:
        engine: the request model's engine.
        builder: the stack's runner.
        spec: the source as Maskscope compiles it.
        serve: the stack's ``--structured-outputs-config`` flags.

    Raises:
        GrammarError: the release refuses the grammar, or is unavailable.
    """
    if spec.kind is GrammarKind.TOOLS:
        return with_stack_tools(engine, builder), spec
    compiled = stack_compile(
        builder,
        spec.kind.value,
        spec.source,
        "xgrammar",
        tokenizer=engine.tools.tokenizer,
        vocab_size=engine.model.tokens.vocab_size,
        serve=serve,
    )
    return engine, compiled.spec
