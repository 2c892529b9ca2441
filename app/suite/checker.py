"""Check a suite: every source × stack × engine, the Doctor's examination and the source's unit
tests, read back from the cache when nothing it depends on changed.

The Doctor examines a source once (it examines xgrammar's compile; llguidance's verdicts are its
llguidance row); each engine then compiles it for itself and runs the tests on its own grammar.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from app.doctor import Doctor, DoctorReport, PydanticSource
from app.engine import AnyEngine, CompileOptions, GrammarKind, GrammarSpec, MaskingLibrary, presets
from app.exceptions import CutShortByLoad, GrammarError, MaskscopeError
from app.settings import Settings
from app.suite.cache import Cache, case_key
from app.suite.discovery import Source
from app.suite.positions import locator_for
from app.suite.records import Case, CheckOptions, Finding, Level
from app.suite.unit_tests import test_findings
from app.suite.verdicts import Place, llguidance_findings, xgrammar_findings

__all__ = ["ENGINES", "STACKS", "Checker", "spec_for", "with_slow_compiles"]

ENGINES = ("xgrammar", "llguidance")


def _maskscope_spec(kind: str, text: str, engine: str, options: CheckOptions) -> GrammarSpec:
    """The request as this app compiles it (the page's and the API's ``GrammarIn.to_spec``)."""
    library = MaskingLibrary(engine)
    if kind in ("structural_tag", "tools"):  # tags take no compile options
        return GrammarSpec(GrammarKind(kind), text, CompileOptions(), library)
    compile_options = dataclasses.replace(presets(library)[options.preset], **options.overrides)
    return GrammarSpec(GrammarKind(kind), text, compile_options, library)


#: The serving stacks a suite is checked against: how each builds the grammar request. A stack
#: of ``app/stacks`` is one more entry.
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


class Checker:
    """Checks sources with one engine (loaded on the first case the cache does not hold).

    Args:
        settings: the run's settings (the sandbox's limits).
        options: what every case is checked with.
        load_engine: loads the engine (the model's tokenizer and the compiler).
        cache: where checked cases are kept (None: no cache).
        jobs: sources checked at once.
    """

    def __init__(self, settings: Settings, options: CheckOptions,
                 load_engine: Callable[[], AnyEngine], *, cache: Cache | None = None,
                 jobs: int = 1) -> None:  # fmt: skip
        self.settings, self.options, self.cache, self.jobs = settings, options, cache, jobs
        self._load = load_engine
        self._engine: AnyEngine | None = None
        self._lock = threading.Lock()

    def engine(self) -> AnyEngine:
        """The engine, loaded on first use."""
        with self._lock:
            if self._engine is None:
                self._engine = self._load()
            return self._engine

    def close(self) -> None:
        """Close the engine, if it was loaded."""
        if self._engine is not None:
            self._engine.close()

    def check(self, sources: Sequence[Source], stacks: Sequence[str],
              engines: Sequence[str]) -> list[Case]:  # fmt: skip
        """Every case, source by source in order, each source's stacks and engines in order."""
        pairs = [(stack, engine) for stack in stacks for engine in engines]
        with ThreadPoolExecutor(max_workers=max(1, self.jobs)) as pool:
            done = pool.map(lambda source: self._source(source, pairs), sources)
            return [case for cases in done for case in cases]

    def _source(self, source: Source, pairs: list[tuple[str, str]]) -> list[Case]:
        keys = {pair: case_key(source, *pair, self.options) for pair in pairs}
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
        report, cut_short = self._examine(source, prepared, pairs)
        return {pair: self._case(source, prepared, *pair, report, cut_short) for pair in pairs}

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

    def _examine(self, source: Source, prepared: _Prepared,
                 pairs: list[tuple[str, str]]) -> tuple[DoctorReport | None, bool]:  # fmt: skip
        """The Doctor's report of xgrammar's compile (None when it does not compile), and
        whether its safety stop cut the examination short."""
        stack = pairs[0][0]
        spec = spec_for(stack, source.kind, prepared.text, "xgrammar", self.options)
        try:
            report = Doctor.of(self.engine()).examine(
                spec, seed=self.options.seed, budget_ms=self.options.budget_ms,
                pydantic=prepared.pydantic,
            )  # fmt: skip
        except CutShortByLoad:
            return None, True
        except GrammarError:
            return None, False
        search = report.search
        return report, bool(search and search.cut_short_by_load)

    def _case(self, source: Source, prepared: _Prepared, stack: str, engine: str,
              report: DoctorReport | None, cut_short: bool) -> Case:  # fmt: skip
        spec = spec_for(stack, source.kind, prepared.text, engine, self.options)
        try:
            grammar = self.engine().compile(spec)
        except MaskscopeError as error:
            finding = _error_finding(error, prepared.place, source)
            return _case(source, stack, engine, False, (finding,))
        findings: list[Finding] = []
        if report is not None:
            read = xgrammar_findings if engine == "xgrammar" else llguidance_findings
            findings += read(report, prepared.place, source.path)
        validate = prepared.pydantic.validate_many if prepared.pydantic else None
        failed, tests = test_findings(source, self.engine(), grammar, validate)
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
