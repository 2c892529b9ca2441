"""What a check reports, as plain records: a finding, one case (a source checked against one
stack and engine), the whole report; ``to_dict``/``from_dict`` give the JSON of ``--format json``
(what ``check merge`` and the cache read back)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = ["Case", "CheckOptions", "Finding", "Level", "REPORT_VERSION", "SuiteReport"]

REPORT_VERSION = 1


class Level(StrEnum):
    """What a finding is; ``--fail-on`` takes any of them."""

    COMPILE_ERROR = "compile_error"  # the source does not parse, derive or compile
    IGNORED = "ignored"  # the grammar is the same without the keyword
    WEAKENED = "weakened"  # a document the grammar accepts breaks the keyword
    OVER_RESTRICTED = "over_restricted"  # the grammar refuses documents the schema accepts
    UNCONSTRAINED = "unconstrained"  # a tool call, or part of one, is left free
    TEST_FAILED = "test_failed"  # a schema unit test failed
    SLOW_COMPILE = "slow_compile"  # the compile took at least the threshold


#: The levels a source's ``residue`` lists: constraints the grammar does not enforce as written.
_RESIDUE = (Level.IGNORED, Level.WEAKENED, Level.OVER_RESTRICTED)


@dataclass(frozen=True)
class Finding:
    """One thing a check found, at its place in the source's file.

    Attributes:
        level: what it is.
        message: in words.
        pointer: the JSON pointer of the constraint (None: the source as a whole).
        keyword: the constraint keyword, when one.
        line: 1-based line in ``file`` (the JSONL line for a JSONL suite's source).
        column: 1-based column (code points).
        file: the file the line is in (the source's, or its tests file's).
        witness: a document that shows it (accepted though invalid, or valid though refused).
        baselined: accepted by the baseline (never fails the run).
    """

    level: Level
    message: str
    pointer: str | None = None
    keyword: str | None = None
    line: int = 1
    column: int = 1
    file: str = ""
    witness: str | None = None
    baselined: bool = False

    def key(self, case: Case) -> str:
        """A stable key for the baseline: the source, stack, engine, level and constraint, never
        the line (an edit above it moves it) nor the witness (a new seed changes it)."""
        parts = [case.source, case.stack, case.engine, self.level.value]
        parts += [self.pointer or "", self.keyword or ""]
        if self.pointer is None:  # nothing else names a compile error or a failed test
            parts.append(self.witness or "" if self.level is Level.TEST_FAILED else self.message)
        return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:24]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return dataclasses.asdict(self) | {"level": self.level.value}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Finding:
        """The inverse of :meth:`to_dict`."""
        return cls(**(data | {"level": Level(data["level"])}))


@dataclass(frozen=True)
class CheckOptions:
    """What every case of a run is checked with (all of it in the cache key).

    Attributes:
        preset: the compile options' preset.
        overrides: compile options set over the preset (``any_whitespace``, ``strict_mode``...).
        model: the model whose tokenizer compiles (``local`` or a tokenizer-only model's id).
        seed: the Doctor's witness search's seed.
        budget_ms: each part of the Doctor's examination's safety stop.
        root_model: the Pydantic model to check (default: the last in the file).
    """

    preset: str = "maskscope"
    overrides: dict[str, Any] = field(default_factory=dict)
    model: str = "local"
    seed: int = 0
    budget_ms: int = 20_000
    root_model: str | None = None

    def key(self) -> str:
        """The options as canonical JSON."""
        return json.dumps(dataclasses.asdict(self), sort_keys=True)


@dataclass(frozen=True)
class Case:
    """One source checked against one stack and one engine.

    Attributes:
        source: the source's name (its path, or ``FILE.jsonl#NAME``).
        file: the file its findings point at.
        kind: the source kind.
        stack: the serving stack (``maskscope``: this app's own compile).
        engine: the masking library (``xgrammar``, ``llguidance``).
        compiled: whether it compiled.
        compile_ms: the compile's time (None when it did not compile).
        size_bytes: the compiled grammar's size.
        findings: what was found, in order.
        tests: ``{"passed": n, "failed": n}``, or None without tests.
        cut_short: the Doctor's examination was cut short by its safety stop (a busy machine).
        cached: read from the cache rather than checked in this run.
    """

    source: str
    file: str
    kind: str
    stack: str
    engine: str
    compiled: bool
    compile_ms: float | None = None
    size_bytes: int | None = None
    findings: tuple[Finding, ...] = ()
    tests: dict[str, int] | None = None
    cut_short: bool = False
    cached: bool = False

    @property
    def id(self) -> str:
        """``source [stack/engine]``: the case's name in JUnit and the text report."""
        return f"{self.source} [{self.stack}/{self.engine}]"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: each finding with its baseline key."""
        out = dataclasses.asdict(self)
        out["findings"] = [f.to_dict() | {"key": f.key(self)} for f in self.findings]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Case:
        """The inverse of :meth:`to_dict`."""
        findings = tuple(
            Finding.from_dict({k: v for k, v in f.items() if k != "key"}) for f in data["findings"]
        )
        return cls(**(data | {"findings": findings}))


@dataclass(frozen=True)
class SuiteReport:
    """A whole run: every case, the levels that fail it, and the shard it was."""

    cases: tuple[Case, ...]
    fail_on: tuple[Level, ...]
    shard: tuple[int, int] | None = None

    def failing(self) -> list[tuple[Case, Finding]]:
        """The findings at a failing level that no baseline accepts."""
        return [
            (case, f)
            for case in self.cases
            for f in case.findings
            if f.level in self.fail_on and not f.baselined
        ]

    def exit_status(self) -> int:
        """1 when a finding fails the run, else 0."""
        return 1 if self.failing() else 0

    def counts(self) -> dict[str, int]:
        """Findings by level (baselined ones left out)."""
        out = {level.value: 0 for level in Level}
        for case in self.cases:
            for f in case.findings:
                out[f.level.value] += not f.baselined
        return out

    def to_dict(self) -> dict[str, Any]:
        """The ``--format json`` report."""
        return {
            "version": REPORT_VERSION,
            "fail_on": [level.value for level in self.fail_on],
            "shard": list(self.shard) if self.shard else None,
            "summary": {
                "cases": len(self.cases),
                "failing": len(self.failing()),
                "findings": self.counts(),
            },  # fmt: skip
            "cases": [case.to_dict() for case in self.cases],
            "sources": self.sources(),
        }

    def sources(self) -> list[dict[str, Any]]:
        """The contract's view of the cases, source by source (GRID-like): each stack ×
        engine's result with its ``residue`` (each constraint not enforced as written: its
        keyword, pointer, place and status), what it leaves ``unconstrained`` and its tests.
        Read from the cases; :meth:`from_dict` reads ``cases`` back."""
        grouped: dict[str, dict[str, Any]] = {}
        for case in self.cases:
            source = grouped.setdefault(
                case.source, {"path": case.source, "file": case.file, "kind": case.kind,
                              "results": []},
            )  # fmt: skip
            residue = [
                {"keyword": f.keyword, "pointer": f.pointer, "line": f.line, "column": f.column,
                 "status": f.level.value, "message": f.message}
                | ({"witness": f.witness} if f.witness is not None else {})
                for f in case.findings if f.level in _RESIDUE
            ]  # fmt: skip
            source["results"].append({
                "stack": case.stack, "engine": case.engine, "compiled": case.compiled,
                "compile_ms": case.compile_ms, "size_bytes": case.size_bytes, "residue": residue,
                "unconstrained": [
                    f"{f.pointer}: {f.message}" if f.pointer else f.message
                    for f in case.findings if f.level is Level.UNCONSTRAINED
                ],
                "tests": case.tests or {"passed": 0, "failed": 0},
                "cut_short": case.cut_short,
            })  # fmt: skip
        return list(grouped.values())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SuiteReport:
        """The inverse of :meth:`to_dict`."""
        shard = data.get("shard")
        return cls(
            tuple(Case.from_dict(c) for c in data["cases"]),
            tuple(Level(level) for level in data["fail_on"]),
            (int(shard[0]), int(shard[1])) if shard else None,
        )
