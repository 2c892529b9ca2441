"""The Suite view's table: a status column per stack × engine, a row per source, each cell the
case's compile, findings by level and tests, with the rank it sorts by."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.suite import Case, Level, SuiteReport

__all__ = ["columns", "rows"]


def columns(stacks: Sequence[str], engines: Sequence[str]) -> list[dict[str, str]]:
    """The status columns: one per stack × engine."""
    return [{"stack": s, "engine": e, "label": f"{s} / {e}"} for s in stacks for e in engines]


def _cell(case: Case | None, fail_on: Sequence[Level]) -> dict[str, Any]:
    """One status cell: compiled, findings by level, the tests, and its sort rank (a failing
    finding ranks first, then any finding, then clean)."""
    if case is None:
        return {"state": "unchecked", "rank": 0, "levels": {}, "tests": None, "compile_ms": None}
    levels: dict[str, int] = {}
    for finding in case.findings:
        if not finding.baselined:
            levels[finding.level.value] = levels.get(finding.level.value, 0) + 1
    failing = sum(n for level, n in levels.items() if Level(level) in fail_on)
    state = "error" if not case.compiled else "fail" if failing else "warn" if levels else "ok"
    rank = {"error": 4000, "fail": 3000, "warn": 2000, "ok": 1000}[state] + sum(levels.values())
    return {
        "state": state,
        "rank": rank,
        "levels": levels,
        "tests": case.tests,
        "compile_ms": case.compile_ms,
    }


def rows(
    report: SuiteReport, sources: Sequence[dict[str, Any]], cols: Sequence[dict[str, str]]
) -> list[dict[str, Any]]:
    """One row per source (in the suite's order): its name, kind, status (the worst of its
    cells) and a cell per column."""
    by_source: dict[str, dict[tuple[str, str], Case]] = {}
    for case in report.cases:
        by_source.setdefault(case.source, {})[(case.stack, case.engine)] = case
    out = []
    for source in sources:
        cases = by_source.get(source["name"], {})
        cells = [_cell(cases.get((c["stack"], c["engine"])), report.fail_on) for c in cols]
        worst = max(cells, key=lambda c: c["rank"]) if cells else {"state": "unchecked"}
        out.append(
            {
                "name": source["name"],
                "kind": source["kind"],
                "state": worst["state"],
                "cells": cells,
            }
        )
    return out
