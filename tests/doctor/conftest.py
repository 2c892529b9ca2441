"""The Doctor of the session's engine (real model tokenizer, real compile workers)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.doctor import Doctor, DoctorReport
from app.engine import CompileOptions, Engine, GrammarKind, GrammarSpec


@pytest.fixture(scope="session")
def doctor(engine: Engine) -> Doctor:
    """One doctor per engine: its vocabulary and llguidance tokenizer are built once."""
    return Doctor.of(engine)


def examine(doctor: Doctor, schema: Any, *, seed: int = 0, **options: Any) -> DoctorReport:
    """Examine a JSON Schema written as an indented document (so keywords have lines)."""
    spec = GrammarSpec(GrammarKind.JSON_SCHEMA, json.dumps(schema, indent=2),
                       CompileOptions(**options))  # fmt: skip
    return doctor.examine(spec, seed=seed, budget_ms=4000)
