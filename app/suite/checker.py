"""Check a suite: every source × stack × engine, the Doctor's examination and the source's unit
tests, read back from the cache when nothing it depends on changed.

The Doctor examines a source once per stack (it examines xgrammar's compile; llguidance's
verdicts are its llguidance row); each engine then compiles it for itself and runs the tests on
its own grammar. Under ``maskscope`` the grammar is this app's compile with the run's options;
under a vLLM stack it is what that release's own code makes of the source, asked through its
runner (:mod:`app.suite.stacked`): a tools source's tag from its builder, a schema's or grammar's
refusal or options from its structured-output backend, a request derived by its server's code.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.doctor import Doctor, DoctorReport, PydanticSource
from app.engine import AnyEngine, CompileOptions, GrammarKind, GrammarSpec, MaskingLibrary, presets
from app.engine.stack_pins import MASKSCOPE
from app.exceptions import CutShortByLoad, GrammarError, GrammarTooComplex, MaskscopeError
from app.settings import Settings
from app.suite import stacked
from app.suite.cache import Cache, case_key
from app.suite.discovery import Source
from app.suite.positions import locator_for
from app.suite.records import Case, CheckOptions, Finding, Level
from app.suite.unit_tests import test_findings
from app.suite.verdicts import Place, llguidance_findings, xgrammar_findings

if TYPE_CHECKING:
    from app.engine.grammars.tools.vllm_builder import VllmBuilder

#: Examines a grammar request on an engine: :meth:`Doctor.examine` in this process (the command
#: line's own files), or in the Doctor's killable worker processes (a server's uploads).
Examine = Callable[[AnyEngine, GrammarSpec, PydanticSource | None], DoctorReport]

__all__ = ["ENGINES", "STACKS", "Checker", "Examine", "spec_for", "with_slow_compiles"]

ENGINES = ("xgrammar", "llguidance")
#: How a stack's derivation of a request that it leaves free begins
#: (:func:`app.engine.grammars.request.derived_request`): an ``unconstrained`` finding.
_CONSTRAINS_NOTHING = "vLLM constrains nothing"


def _maskscope_spec(kind: str, text: str, engine: str, options: CheckOptions) -> GrammarSpec:
    """The request as this app compiles it (the page's and the API's ``GrammarIn.to_spec``)."""
    library = MaskingLibrary(engine)
    if kind in ("structural_tag", "tools"):  # tags take no compile options
        return GrammarSpec(GrammarKind(kind), text, CompileOptions(), library)
    compile_options = dataclasses.replace(presets(library)[options.preset], **options.overrides)
    return GrammarSpec(GrammarKind(kind), text, compile_options, library)


#: The in-process stack: how it builds the grammar request. The vLLM stacks (``MASKSCOPE_STACKS``,
#: :func:`app.engine.stacks.configured`) are asked through their runners instead.
STACKS: dict[str, Callable[[str, str, str, CheckOptions], GrammarSpec]] = {
    "maskscope": _maskscope_spec,
}


def spec_for(stack: str, kind: str, text: str, engine: str, options: CheckOptions) -> GrammarSpec:
    """What ``stack`` compiles for a source of ``kind`` (a Pydantic source: its derived JSON
    Schema, as ``json_schema``) masked by ``engine``."""
    return STACKS[stack]("json_schema" if kind == "pydantic" else kind, text, engine, options)


@dataclass(frozen=True)
class _Prepared:
    """A source ready to compile: its text (a Pydantic source's derived schema), and where its
    pointers are."""

    text: str
    place: Place
    pydantic: PydanticSource | None = None


@dataclass(frozen=True)
class _View:
    """A source as one stack masks it.

    Attributes:
        specs: by engine, what Maskscope compiles (the stack's grammar and options), or the
            stack's refusal; ``xgrammar``'s is the one the Doctor examines.
        engine: the engine that compiles it (a ``tools`` source under a vLLM stack: one whose
            tools builder is that release's).
        place: where a pointer is in the file.
        pydantic: the Pydantic source the schema came from.
    """

    specs: dict[str, GrammarSpec | MaskscopeError]
    engine: AnyEngine
    place: Place
    pydantic: PydanticSource | None = None


class Checker:
    """Checks sources with one engine (loaded on the first case the cache does not hold).

    Args:
        settings: the run's settings (the sandbox's limits, the stacks' runners).
        options: what every case is checked with.
        load_engine: loads the engine (the model's tokenizer and the compiler).
        cache: where checked cases are kept (None: no cache).
        jobs: sources checked at once.
        examine: runs the Doctor's examination (default: in this process, bounded by its counts
            and its safety stop; a server passes its killable, memory-capped workers).
    """

    def __init__(self, settings: Settings, options: CheckOptions,
                 load_engine: Callable[[], AnyEngine], *, cache: Cache | None = None,
                 jobs: int = 1, examine: Examine | None = None) -> None:  # fmt: skip
        self.settings, self.options, self.cache, self.jobs = settings, options, cache, jobs
        self._load = load_engine
        self._examiner = examine or self._in_process
        self._engine: AnyEngine | None = None
        self._lock = threading.Lock()
        self._stacked: dict[str, AnyEngine] = {}
        self._versions: dict[str, dict[str, str]] = {}
        self._default: VllmBuilder | None = None

    def engine(self) -> AnyEngine:
        """The engine, loaded on first use."""
        with self._lock:
            if self._engine is None:
                self._engine = self._load()
            return self._engine

    def close(self) -> None:
        """Close the engine, if it was loaded (the stacks' runners stay warm for the next
        call, as every CLI call leaves them)."""
        if self._engine is not None:
            self._engine.close()

    def check(self, sources: Sequence[Source], stacks: Sequence[str],
              engines: Sequence[str]) -> list[Case]:  # fmt: skip
        """Every case, source by source in order, each source's stacks and engines in order."""
        pairs = [(stack, engine) for stack in stacks for engine in engines]
        with ThreadPoolExecutor(max_workers=max(1, self.jobs)) as pool:
            done = pool.map(lambda source: self._source(source, pairs), sources)
            return [case for cases in done for case in cases]

    def builder(self, stack: str) -> VllmBuilder:
        """The runner of vLLM stack ``stack``; ``maskscope``'s: the default vLLM stack's, which
        derives its request sources (as ``compile`` does)."""
        from app.engine.grammars.tools.vllm_builder import VllmBuilder
        from app.engine.stacks import runner

        if stack != MASKSCOPE:
            return runner(self.settings, stack)
        with self._lock:
            if self._default is None:
                self._default = VllmBuilder(self.settings)
            return self._default

    def stack_versions(self, stack: str, kind: str) -> dict[str, str]:
        """What the stack's own process imports (vllm, xgrammar, ...: part of the cache key, so
        a stack upgraded in place is checked again); none for ``maskscope`` but a request's
        deriving stack's."""
        if stack == MASKSCOPE and kind != "request":
            return {}
        with self._lock:
            found = self._versions.get(stack)
        if found is None:
            try:
                found = self.builder(stack).versions()
            except MaskscopeError as error:  # the case says so: not kept as a version
                return {"unavailable": error.message}
            with self._lock:
                self._versions[stack] = found
        return found

    def _source(self, source: Source, pairs: list[tuple[str, str]]) -> list[Case]:
        keys = {
            pair: case_key(source, *pair, self.options, self.stack_versions(pair[0], source.kind))
            for pair in pairs
        }
        found: dict[tuple[str, str], Case | None] = {
            pair: self.cache.get(keys[pair]) if self.cache else None for pair in pairs
        }
        missing = [pair for pair in pairs if found[pair] is None]
        if missing:
            for pair, checked in self._checked(source, missing).items():
                found[pair] = checked
                if self.cache is not None:  # cut short too: it says so; --no-cache re-examines
                    self.cache.put(keys[pair], checked)
        return [case for pair in pairs if (case := found[pair]) is not None]

    def _checked(self, source: Source, pairs: list[tuple[str, str]]) -> dict[tuple[str, str], Case]:
        try:
            prepared = self._prepare(source)
        except MaskscopeError as error:
            place = _placed(source, locator_for(source.kind, source.text or ""))
            finding = _error_finding(error, place, source)
            return {pair: _case(source, *pair, False, (finding,)) for pair in pairs}
        out: dict[tuple[str, str], Case] = {}
        for stack in dict.fromkeys(stack for stack, _ in pairs):
            engines = [engine for each, engine in pairs if each == stack]
            try:
                view = self._view(source, prepared, stack, engines)
            except MaskscopeError as error:
                finding = _error_finding(error, prepared.place, source)
                if error.message.startswith(_CONSTRAINS_NOTHING):
                    finding = dataclasses.replace(finding, level=Level.UNCONSTRAINED)
                out |= {(stack, e): _case(source, stack, e, False, (finding,)) for e in engines}
                continue
            report, cut_short = self._examine(view)
            for engine in engines:
                out[(stack, engine)] = self._case(source, view, stack, engine, report, cut_short)
        return out

    def _prepare(self, source: Source) -> _Prepared:
        if source.text is None:
            raise GrammarError(source.error or "the file cannot be read", line=1, column=1)
        if source.kind != "pydantic":
            return _Prepared(source.text, _placed(source, locator_for(source.kind, source.text)))
        from app.sandbox.sandbox import Sandbox

        sandbox = Sandbox.from_settings(self.settings)
        derived = sandbox.schema(source.text, self.options.root_model)
        validate = functools.partial(sandbox.validate_many, source.text, self.options.root_model)
        place = _placed(source, locator_for("pydantic", source.text, pydantic_root=derived.root))
        pydantic = PydanticSource(source.text, derived.root, validate)
        return _Prepared(json.dumps(derived.schema, indent=2), place, pydantic)

    def _view(self, source: Source, prepared: _Prepared, stack: str,
              engines: list[str]) -> _View:  # fmt: skip
        """The source as ``stack`` masks it for ``engines`` (and xgrammar, for the Doctor).

        Raises:
            MaskscopeError: the stack refuses the source as a whole (a request it cannot derive,
                a tools source it cannot build), or is unavailable.
        """
        kind = "json_schema" if source.kind == "pydantic" else source.kind
        text, place = prepared.text, prepared.place
        if kind == "request":
            derived = stacked.derive(self.builder(stack), text, self.engine())
            kind, text = derived.kind.value, derived.source
            place = _placed(source, stacked.request_locator(prepared.text, derived))
            serve = derived.structured_outputs_config
        else:
            serve = {}
        wanted = list(dict.fromkeys(["xgrammar", *engines]))
        if stack == MASKSCOPE:
            specs: dict[str, GrammarSpec | MaskscopeError] = {
                e: _maskscope_spec(kind, text, e, self.options) for e in wanted
            }
            return _View(specs, self.engine(), place, prepared.pydantic)
        if kind == "tools":
            return self._tools_view(stack, text, wanted, place)
        specs = {}
        for engine in wanted:
            try:
                specs[engine] = self._stack_compile(stack, kind, text, engine, serve).spec
            except GrammarError as error:
                specs[engine] = error
        return _View(specs, self.engine(), place, prepared.pydantic)

    def _stack_compile(self, stack: str, kind: str, text: str, engine: str,
                       serve: dict[str, Any]) -> stacked.StackCompile:  # fmt: skip
        model = self.engine()
        return stacked.stack_compile(
            self.builder(stack), kind, text, engine, tokenizer=model.tools.tokenizer,
            vocab_size=model.model.tokens.vocab_size, serve=serve,
        )  # fmt: skip

    def _tools_view(self, stack: str, text: str, engines: list[str], place: Place) -> _View:
        """A tools source under a vLLM stack: the tag that release's builder builds, compiled;
        each engine's backend in the stack compiles it too, or refuses it."""
        try:
            named = json.loads(text).get("builder")
        except (ValueError, AttributeError):
            named = None
        if named not in (None, "vllm"):
            raise GrammarError(
                f"{stack} builds a tools source's tag with its own tool-call parsers (builder "
                f'"vllm"); this source names the {named} builder, which that release does not run',
                pointer="/builder",
            )
        model, builder = self.engine(), self.builder(stack)
        with self._lock:
            engine = self._stacked.get(stack)
            if engine is None:
                engine = self._stacked[stack] = stacked.with_stack_tools(model, builder)
        specs: dict[str, GrammarSpec | MaskscopeError] = {}
        for name in engines:
            spec = GrammarSpec(GrammarKind.TOOLS, text, CompileOptions(), MaskingLibrary(name))
            _, build = engine.tools.build(spec)
            specs[name] = spec
            if build.tag is not None:
                tag = json.dumps(build.tag)
                try:
                    self._stack_compile(stack, "structural_tag", tag, name, {})
                except GrammarError as error:
                    specs[name] = error
        return _View(specs, engine, place)

    def _examine(self, view: _View) -> tuple[DoctorReport | None, bool]:
        """The Doctor's report of xgrammar's compile of the stack's grammar (None when it does
        not compile), and whether its safety stop cut the examination short."""
        spec = view.specs["xgrammar"]
        if isinstance(spec, MaskscopeError):
            return None, False
        try:
            report = self._examiner(view.engine, spec, view.pydantic)
        except (CutShortByLoad, GrammarTooComplex):  # the safety stop, or the memory cap
            return None, True
        except GrammarError:
            return None, False
        search = report.search
        return report, bool(search and search.cut_short_by_load)

    def _in_process(self, engine: AnyEngine, spec: GrammarSpec,
                    pydantic: PydanticSource | None) -> DoctorReport:  # fmt: skip
        return Doctor.of(engine).examine(
            spec, seed=self.options.seed, budget_ms=self.options.budget_ms, pydantic=pydantic
        )

    def _case(self, source: Source, view: _View, stack: str, engine: str,
              report: DoctorReport | None, cut_short: bool) -> Case:  # fmt: skip
        spec = view.specs[engine]
        try:
            if isinstance(spec, MaskscopeError):
                raise spec
            grammar = view.engine.compile(spec)
        except MaskscopeError as error:
            finding = _error_finding(error, view.place, source)
            return _case(source, stack, engine, False, (finding,))
        findings: list[Finding] = []
        if report is not None and engine == "xgrammar":
            findings += xgrammar_findings(report, view.place, source.path)
        elif report is not None:
            found = llguidance_findings(report, view.place, source.path)
            # under a serving stack, its own backend said whether llguidance compiles it
            findings += [
                f for f in found if stack == MASKSCOPE or f.level is not Level.COMPILE_ERROR
            ]
        validate = view.pydantic.validate_many if view.pydantic else None
        failed, tests = test_findings(source, view.engine, grammar, validate)
        return dataclasses.replace(
            _case(source, stack, engine, True, (*findings, *failed)),
            compile_ms=round(grammar.compile_ms, 3), size_bytes=grammar.size_bytes, tests=tests,
            cut_short=cut_short,
        )  # fmt: skip


def _case(source: Source, stack: str, engine: str, compiled: bool,
          findings: tuple[Finding, ...]) -> Case:  # fmt: skip
    return Case(source.name, source.path, source.kind, stack, engine, compiled,
                findings=findings)  # fmt: skip


def _placed(source: Source, locate: Callable[[str], tuple[int, int] | None]) -> Place:
    """A pointer's place: in the file, or the JSONL line a suite line's source is."""
    if source.line is not None:
        line = source.line
        return lambda _: (line, 1)
    return lambda pointer: (locate(pointer) if pointer is not None else None) or (1, 1)


def _error_finding(error: MaskscopeError, place: Place, source: Source) -> Finding:
    """A source that does not read, derive or compile, at the line the error names (a suite
    line's source: at that line of the JSONL)."""
    line, column = place(error.pointer)
    if error.line is not None and error.pointer is None and source.line is None:
        line, column = error.line, error.column or 1
    return Finding(Level.COMPILE_ERROR, error.message, error.pointer, None, line, column,
                   source.path)  # fmt: skip


def with_slow_compiles(cases: Sequence[Case], threshold_ms: float | None) -> list[Case]:
    """Each case with a ``slow_compile`` finding when its compile took ``threshold_ms`` or more
    (applied after the cache: the threshold is a reading of the kept compile time)."""
    if threshold_ms is None:
        return list(cases)
    out = []
    for case in cases:
        if case.compile_ms is not None and case.compile_ms >= threshold_ms:
            message = f"compiled in {case.compile_ms:.1f} ms (threshold {threshold_ms:g} ms)"
            slow = Finding(Level.SLOW_COMPILE, message, file=case.file)
            case = dataclasses.replace(case, findings=(*case.findings, slow))
        out.append(case)
    return out
