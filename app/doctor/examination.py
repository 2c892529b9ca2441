"""One JSON Schema examined: the parts run side by side, then the report (the Doctor's core).

:class:`~app.doctor.doctor.Doctor` runs it for a schema and ``tools.py`` for each tool's
arguments; both reach the engine only through :class:`Examiner`, so neither imports the other.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

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
from app.engine.grammars.keyword_probe import ProbeResult
from app.engine.grammars.spec import CompileResult, GrammarSpec
from app.engine.tokens import Tokens

__all__ = [
    "PROBED_KEYWORDS",
    "Examination",
    "Examiner",
    "OtherCompile",
    "PydanticSource",
    "costs_of",
]

#: Keywords compared with and without themselves, at most (a count: the others are unchecked,
#: and say why).
PROBED_KEYWORDS = 1000


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


class Examiner(Protocol):
    """What an examination asks of the Doctor that runs it: its engine's compiles and tokens."""

    tokens: Tokens
    llguidance: Llguidance

    def vocab(self) -> Vocab:
        """The tokenizer's vocabulary sorted by kind."""
        ...

    def compile(self, spec: GrammarSpec) -> CompileResult:
        """``spec`` compiled by the engine."""
        ...

    def compile_other_whitespace(self, spec: GrammarSpec) -> OtherCompile:
        """The same request with ``any_whitespace`` flipped."""
        ...

    def probe(self, spec: GrammarSpec, pointers: list[str], budget_ms: int) -> ProbeResult | None:
        """The keyword probe, ``budget_ms`` its safety stop."""
        ...


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
        doctor: Examiner,
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
        costs = costs_of(self.grammar, other.result, found, max_tokens)
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


def costs_of(
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
