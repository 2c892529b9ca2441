"""The Doctor: is a schema enforced as written, and what will each serving stack do with it?

One examination compiles the request (through the engine's cache), then, at the same time: the
keyword probe runs in a compile worker, the other whitespace setting compiles in another, the
llguidance checks run, and this thread searches for witnesses. The rows of the stacks whose
rules are reproduced come last, from the schema alone.

Every part is bounded by counts (:mod:`app.doctor.safety`), so the same request and seed give the
same report under any load; ``budget_ms`` is each part's wall-clock safety stop only, and a part
it stops says ``cut_short_by_load``, never that the schema is too complex.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from app.doctor import enforcement
from app.doctor.backends import openai_strict, sglang, vllm, xgrammar
from app.doctor.backends.llguidance import Llguidance
from app.doctor.findings import group
from app.doctor.judge import Judge
from app.doctor.keywords import Keyword, constraint_keywords
from app.doctor.proving import Prover
from app.doctor.records import (
    BackendRow,
    Costs,
    Direction,
    DoctorReport,
    Enforcement,
    KeywordFinding,
    Status,
    Verdict,
)
from app.doctor.safety import LOAD_NOTE, Deadline
from app.doctor.source_lines import json_lines, pydantic_lines
from app.doctor.vocab import Vocab
from app.doctor.witnesses import Found, ValidateMany, search
from app.engine.engine import AnyEngine
from app.engine.grammar import CompileResult, GrammarKind, GrammarSpec, MaskingLibrary
from app.engine.keyword_probe import ProbeResult
from app.exceptions import CutShortByLoad, GrammarError, GrammarTooComplex

__all__ = [
    "DEFAULT_BUDGET_MS",
    "MAX_BUDGET_MS",
    "Examination",
    "RUNNING_AT_ONCE",
    "Doctor",
    "OtherCompile",
    "PROBED_KEYWORDS",
    "PydanticSource",
]

#: Each part's wall-clock safety stop by default: ten times what the examples' parts take on a
#: busy 2-core machine, so that load does not reach it; the work itself is a fixed count.
DEFAULT_BUDGET_MS = 20_000
MAX_BUDGET_MS = 120_000
RUNNING_AT_ONCE = 2
#: Keywords compared with and without themselves, at most (a count: the others are unchecked,
#: and say why).
PROBED_KEYWORDS = 1000
_DOCTORS: weakref.WeakKeyDictionary[AnyEngine, Doctor] = weakref.WeakKeyDictionary()
_DOCTORS_LOCK = threading.Lock()


@dataclass(frozen=True)
class PydanticSource:
    """A Pydantic source, for lines in the editor and validation by the model itself.

    Attributes:
        source: the Python source.
        root: the name of the model whose schema was compiled.
        validate_many: validates a batch of texts with that model, in one sandbox process.
    """

    source: str
    root: str
    validate_many: ValidateMany


class Doctor:
    """Examines grammar requests for one engine (its compiler, tokenizer and model).

    Args:
        engine: the loaded engine.
    """

    def __init__(self, engine: AnyEngine) -> None:
        self._engine = engine
        self.tokens = engine.model.tokens
        self._vocab: Vocab | None = None
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(RUNNING_AT_ONCE)
        self.llguidance = Llguidance(engine.llguidance)

    @classmethod
    def of(cls, engine: AnyEngine) -> Doctor:
        """The engine's doctor (one per engine: it keeps the sorted vocabulary and the
        llguidance tokenizer)."""
        with _DOCTORS_LOCK:
            doctor = _DOCTORS.get(engine)
            if doctor is None:
                doctor = _DOCTORS[engine] = cls(engine)
            return doctor

    def vocab(self) -> Vocab:
        """The tokenizer's vocabulary sorted by kind (built on first use)."""
        with self._lock:
            if self._vocab is None:
                self._vocab = Vocab.of(self.tokens)
            return self._vocab

    def examine(
        self,
        spec: GrammarSpec,
        *,
        seed: int = 0,
        budget_ms: int = DEFAULT_BUDGET_MS,
        pydantic: PydanticSource | None = None,
        max_tokens: int | None = None,
    ) -> DoctorReport:
        """Examine one grammar request.

        Args:
            spec: what to compile (a Pydantic source arrives as its derived JSON Schema). The
                examination is of xgrammar's compile whichever library the request names
                (llguidance has its row among the backends).
            seed: the witness search's seed; the same seed gives the same witnesses.
            budget_ms: the wall-clock safety stop of each part (the keyword comparison, the
                witness search, the proofs; each tool's arguments): the work is bounded by
                counts, and a part this stops says ``cut_short_by_load``.
            pydantic: the Pydantic source the schema came from, if any.
            max_tokens: a generation limit to compare with the shortest document.

        Raises:
            GrammarError: the request does not compile.
            CutShortByLoad: an EBNF or regex grammar's walks (its costs, which have no place to
                say so) were cut short by the safety stop.
        """
        spec = dataclasses.replace(spec, library=MaskingLibrary.XGRAMMAR)
        with self._slots:
            grammar = self._engine.compile(spec)
            if spec.kind in (GrammarKind.TOOLS, GrammarKind.STRUCTURAL_TAG):
                from app.doctor import tools  # it builds on this module

                examine = (
                    tools.examine_tools if spec.kind is GrammarKind.TOOLS else tools.examine_tag
                )
                return examine(self, grammar, seed=seed, budget_ms=budget_ms, max_tokens=max_tokens)
            if not spec.is_json:
                return self._grammar_only(
                    grammar, seed=seed, budget_ms=budget_ms, max_tokens=max_tokens
                )
            return Examination(self, grammar, pydantic).run(seed, budget_ms, max_tokens)

    def _grammar_only(
        self, grammar: CompileResult, *, seed: int, budget_ms: int, max_tokens: int | None
    ) -> DoctorReport:
        deadline = Deadline.of_ms(budget_ms)
        found = search(
            grammar, self.tokens, self.vocab(), schema=None, seed=seed, deadline=deadline
        )
        if deadline.reached:
            raise CutShortByLoad(
                f"the Doctor's walks of this grammar (its costs) were {LOAD_NOTE} ({budget_ms} ms)"
            )
        costs = _costs(grammar, None, found, max_tokens)
        row = self.llguidance.assess_grammar(grammar.spec.kind, grammar.spec.source)
        return DoctorReport((), (), None, None, (row,), costs)

    def compile(self, spec: GrammarSpec) -> CompileResult:
        """``spec`` compiled by the engine (in a Doctor process: by the server, over its pipe)."""
        return self._engine.compile(spec)

    def compile_other_whitespace(self, spec: GrammarSpec) -> OtherCompile:
        """The same request with ``any_whitespace`` flipped."""
        options = dataclasses.replace(spec.options, any_whitespace=not spec.options.any_whitespace)
        try:
            return OtherCompile(self._engine.compile(dataclasses.replace(spec, options=options)))
        except GrammarTooComplex:
            return OtherCompile(None)
        except GrammarError:
            return OtherCompile(None, refused=True)

    def probe(self, spec: GrammarSpec, pointers: list[str], budget_ms: int) -> ProbeResult | None:
        """The keyword probe in a compile worker, ``budget_ms`` its safety stop; cut short when
        a conversion ran past the compile time limit (a wall clock too), None when a conversion
        was refused."""
        try:
            return self._engine.compiler.probe_keywords(spec, pointers, budget_s=budget_ms / 1000)
        except GrammarTooComplex:
            return ProbeResult((), (), cut_short=True, ms=0.0)
        except GrammarError:
            return None


@dataclass(frozen=True)
class OtherCompile:
    """The request compiled with the other ``any_whitespace`` setting.

    Attributes:
        result: the compile; None when it failed or ran past the compile time limit.
        refused: xgrammar refused the schema with those options (not a time limit).
    """

    result: CompileResult | None
    refused: bool = False


class Examination:
    """One JSON Schema examined: the concurrent parts, then the report.

    Args:
        doctor: the doctor whose engine compiles and whose tokenizer writes.
        grammar: the compile examined; its spec is the JSON Schema (for the keyword probe) and
            its ``compiled`` the grammar witnesses are replayed through.
        pydantic: the Pydantic source the schema came from, if any.
        line_of: the editor line of a pointer (default: the spec's JSON source, or the
            Pydantic source).
        leaf: a tool's arguments inside a tag: no other-whitespace compile, no llguidance
            checks and no backend rows (the tag's rows are the caller's).
    """

    def __init__(
        self,
        doctor: Doctor,
        grammar: CompileResult,
        pydantic: PydanticSource | None,
        *,
        line_of: Callable[[str], int | None] | None = None,
        leaf: bool = False,
    ):
        self.doctor = doctor
        self.leaf = leaf
        self._lines = line_of
        self.grammar = grammar
        self.spec = grammar.spec
        self.schema = json.loads(self.spec.source)
        self.pydantic = pydantic

    def run(self, seed: int, budget_ms: int, max_tokens: int | None) -> DoctorReport:
        keywords = constraint_keywords(self.schema)
        probed = [k.pointer for k in keywords[:PROBED_KEYWORDS]]
        # Not a `with` block: leaving it on an error would wait for a slow any_whitespace
        # compile (ten times slower, tens of seconds on big schemas).
        pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="doctor")
        try:
            probing = pool.submit(self.doctor.probe, self.spec, probed, budget_ms)
            spacing = pool.submit(self._other_whitespace)
            llg_row = pool.submit(self._llguidance_row)
            guidance = pool.submit(self._guidance_error)
            validate = self.pydantic.validate_many if self.pydantic else None
            searching = Deadline.of_ms(budget_ms)
            found = search(
                self.grammar,
                self.doctor.tokens,
                self.doctor.vocab(),
                schema=self.schema,
                seed=seed,
                deadline=searching,
                validate_many=validate,
            )
            # The compile workers' answers: their own limits bound them (the probe's is
            # budget_ms); the other compile is waited for whole, as it decides vLLM's row.
            probe, other = probing.result(), spacing.result()
            llg, vllm_guidance = llg_row.result(), guidance.result()  # llguidance: fast
        finally:
            pool.shutdown(wait=False)
        line_of = self._line_of()
        unchecked = found.search.unchecked_formats if found.search else ()
        prover = Prover(self.grammar, self.doctor.tokens, self.schema, Judge(self.schema),
                        seed=seed)  # fmt: skip
        proofs = prover.run(keywords, Deadline.of_ms(budget_ms))
        findings = enforcement.findings(
            keywords,
            probe,
            found.witnesses,
            line_of=line_of,
            strict_mode=self.spec.options.strict_mode,
            unchecked_formats=unchecked,
            proofs=proofs,
            unprobed=_unprobed(probe, len(keywords)),
        )
        grouped = group(
            keywords,
            findings,
            proofs,
            found.witnesses,
            typeless=proofs.typeless,
            strict_example=found.strict_example,
        )
        figures = found.search
        if figures is not None and proofs.cut_short:
            by_load = figures.cut_short_by_load or proofs.by_load
            figures = dataclasses.replace(figures, cut_short=True, cut_short_by_load=by_load)
        backends = () if self.leaf else self._backends(findings, found, other, llg, vllm_guidance)
        costs = _costs(self.grammar, other.result, found, max_tokens)
        return DoctorReport(
            findings, found.witnesses, figures, _enforcement(probe, keywords), backends, costs,
            grouped,
        )  # fmt: skip

    def _other_whitespace(self) -> OtherCompile:
        return OtherCompile(None) if self.leaf else self.doctor.compile_other_whitespace(self.spec)

    def _guidance_error(self) -> str:
        return "" if self.leaf else self.doctor.llguidance.schema_error(self.schema)

    def _llguidance_row(self) -> BackendRow:
        if self.leaf:
            return BackendRow("llguidance", "", Verdict.OK)
        return self.doctor.llguidance.assess_schema(self.schema, self.spec.options)

    def _line_of(self) -> Callable[[str], int | None]:
        if self._lines is not None:
            return self._lines
        if self.pydantic is not None:
            return pydantic_lines(self.pydantic.source, self.pydantic.root)
        return json_lines(self.spec.source)

    def _backends(
        self,
        findings: tuple[KeywordFinding, ...],
        found: Found,
        other: OtherCompile,
        llg_row: BackendRow,
        guidance: str,
    ) -> tuple[BackendRow, ...]:
        weaker = sum(w.direction is Direction.GRAMMAR_ACCEPTS for w in found.witnesses)
        stricter = len(found.witnesses) - weaker
        row = xgrammar.assess(
            findings,
            self.grammar.warnings,
            strict_example=found.strict_example,
            weaker=weaker,
            stricter=stricter,
        )
        ignores = weaker > 0 or any(f.status in (Status.IGNORED, Status.WEAKENED) for f in findings)
        # vLLM converts with any_whitespace; this request's own options compiled already.
        converts = self.spec.options.any_whitespace or not other.refused
        return (
            row,
            vllm.assess(
                self.schema,
                converts=converts,
                guidance_error=lambda _: guidance,
                xgrammar_ignores=ignores,
            ),
            sglang.assess(self.schema, xgrammar_ignores=ignores),
            llg_row,
            openai_strict.assess(self.schema),
        )


def _unprobed(probe: ProbeResult | None, total: int) -> str:
    """Why the comparison has no answer for a keyword."""
    if probe is None:
        return "not compared: xgrammar refused the schema without one of its keywords"
    if probe.cut_short:
        return f"not compared: {LOAD_NOTE}"
    if total > PROBED_KEYWORDS:
        return f"not compared: the Doctor compares the first {PROBED_KEYWORDS} keywords"
    return "not compared: the schema cannot be converted without this keyword alone"


def _enforcement(probe: ProbeResult | None, keywords: list[Keyword]) -> Enforcement:
    """How the comparison went: cut short by its count, or by load (its safety stop)."""
    if probe is None:
        return Enforcement(0, len(keywords), 0.0, bool(keywords))
    counted = len(keywords) > PROBED_KEYWORDS
    return Enforcement(
        len(probe.probes), len(keywords), probe.ms, probe.cut_short or counted, probe.cut_short
    )


def _costs(
    grammar: CompileResult, other: CompileResult | None, found: Found, max_tokens: int | None
) -> Costs:
    """Compile time without and with any whitespace, size, shortest document, whitespace runs."""
    spaced, compact = (grammar, other) if grammar.spec.options.any_whitespace else (other, grammar)
    shortest = found.shortest
    below = None if shortest is None or max_tokens is None else max_tokens < shortest.tokens
    return Costs(
        compile_ms=(compact or grammar).compile_ms,
        compile_ms_any_whitespace=spaced.compile_ms if spaced and grammar.spec.is_json else None,
        size_bytes=grammar.size_bytes,
        shortest_document_tokens=shortest.tokens if shortest else None,
        shortest_document=shortest.text if shortest else None,
        unbounded_whitespace=found.unbounded_whitespace,
        max_tokens_below_shortest=below,
    )
