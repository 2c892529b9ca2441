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
import threading
import weakref
from typing import TYPE_CHECKING

from app.doctor import tools
from app.doctor.backends.llguidance import Llguidance
from app.doctor.end import with_end_finding
from app.doctor.examination import Examination, OtherCompile, PydanticSource, costs_of
from app.doctor.records import DoctorReport
from app.doctor.safety import LOAD_NOTE, Deadline
from app.doctor.tools_roundtrip import with_template_finding
from app.doctor.vocab import Vocab
from app.doctor.witnesses import search
from app.engine.grammars.keyword_probe import ProbeResult
from app.engine.grammars.spec import CompileResult, GrammarKind, GrammarSpec, MaskingLibrary
from app.exceptions import CutShortByLoad, GrammarError, GrammarTooComplex

if TYPE_CHECKING:  # the Doctor's worker process has no model: its engine is a proxy
    from app.engine.engine import AnyEngine

__all__ = [
    "DEFAULT_BUDGET_MS",
    "MAX_BUDGET_MS",
    "RUNNING_AT_ONCE",
    "Doctor",
    "PydanticSource",
]

#: Each part's wall-clock safety stop by default: ten times what the examples' parts take on a
#: busy 2-core machine, so that load does not reach it; the work itself is a fixed count.
DEFAULT_BUDGET_MS = 20_000
MAX_BUDGET_MS = 120_000
RUNNING_AT_ONCE = 2
_DOCTORS: weakref.WeakKeyDictionary[AnyEngine, Doctor] = weakref.WeakKeyDictionary()
_DOCTORS_LOCK = threading.Lock()


class Doctor:
    """Examines grammar requests for one engine (its compiler, tokenizer and model).

    Args:
        engine: the loaded engine.
        round_trip: add the template round trip's findings to a ``tools`` source's report
            (:mod:`app.doctor.tools_roundtrip`); off in a Doctor process, whose server adds
            them (it holds the builders).
    """

    def __init__(self, engine: AnyEngine, *, round_trip: bool = True) -> None:
        self._engine = engine
        self._round_trip = round_trip
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
            GrammarError: the request does not compile, or a ``tools`` source's pasted
                ``chat_template`` fails to render.
            CutShortByLoad: an EBNF or regex grammar's walks (its costs, which have no place to
                say so) were cut short by the safety stop.
        """
        spec = dataclasses.replace(spec, library=MaskingLibrary.XGRAMMAR)
        with self._slots:
            grammar = self._engine.compile(spec)
            report = self._examine(spec, grammar, seed, budget_ms, pydantic, max_tokens)
            report = with_end_finding(report, grammar, self.tokens, self._engine.model)
            if self._round_trip:
                report = with_template_finding(report, self._engine, spec)
            return report

    def _examine(
        self,
        spec: GrammarSpec,
        grammar: CompileResult,
        seed: int,
        budget_ms: int,
        pydantic: PydanticSource | None,
        max_tokens: int | None,
    ) -> DoctorReport:
        if spec.kind in (GrammarKind.TOOLS, GrammarKind.STRUCTURAL_TAG):
            examine = tools.examine_tools if spec.kind is GrammarKind.TOOLS else tools.examine_tag
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
        costs = costs_of(grammar, None, found, max_tokens)
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
