"""The Doctor of the session's engine (real model tokenizer, real compile workers)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.doctor import Doctor, DoctorReport
from app.doctor.doctor import DEFAULT_BUDGET_MS
from app.engine import CompileOptions, Engine, GrammarKind, GrammarSpec


@pytest.fixture(scope="session")
def doctor(engine: Engine) -> Doctor:
    """One doctor per engine: its vocabulary and llguidance tokenizer are built once."""
    return Doctor.of(engine)


def examine(doctor: Doctor, schema: Any, *, seed: int = 0, **options: Any) -> DoctorReport:
    """Examine a JSON Schema written as an indented document (so keywords have lines)."""
    spec = GrammarSpec(GrammarKind.JSON_SCHEMA, json.dumps(schema, indent=2),
                       CompileOptions(**options))  # fmt: skip
    return counted(doctor.examine(spec, seed=seed, budget_ms=DEFAULT_BUDGET_MS))


def counted(report: DoctorReport) -> DoctorReport:
    """``report``, checked to have ended at its counts (app/doctor/safety.py), so that one seed
    gives one answer under any load: the wall-clock budget is only the safety stop, and an
    answer it cut short fails the test that asserts on it rather than passing as another."""
    for part in (report.search, report.enforcement):
        assert part is None or not part.cut_short_by_load, f"cut short by load: {part}"
    return report
