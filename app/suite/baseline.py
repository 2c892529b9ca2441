"""A baseline: the findings a team has accepted, so that only new ones fail the run (as ruff's and
mypy's baselines do). Each is kept by its stable key (:meth:`Finding.key`) with what it was, for
a person reading the file."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from app.exceptions import InvalidInput
from app.suite.records import Case

__all__ = ["BASELINE_VERSION", "apply_baseline", "read_baseline", "write_baseline"]

BASELINE_VERSION = 1


def write_baseline(path: Path, cases: list[Case]) -> int:
    """Write every finding of ``cases`` to ``path``; returns how many."""
    entries = sorted(
        (
            {
                "key": f.key(case),
                "source": case.source,
                "stack": case.stack,
                "engine": case.engine,
                "level": f.level.value,
                "pointer": f.pointer,
                "message": f.message,
            }  # fmt: skip
            for case in cases
            for f in case.findings
        ),
        key=lambda e: (e["source"], e["stack"], e["engine"], e["key"]),
    )
    body = {"version": BASELINE_VERSION, "findings": entries}
    path.write_text(json.dumps(body, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return len(entries)


def read_baseline(path: Path) -> set[str]:
    """The keys a baseline file accepts.

    Raises:
        InvalidInput: the file is missing or is not a baseline.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return {str(entry["key"]) for entry in data["findings"]}
    except OSError as error:
        raise InvalidInput(f"{path}: cannot read the baseline ({error.strerror})") from None
    except (ValueError, KeyError, TypeError):
        raise InvalidInput(f'{path}: not a baseline (a {{"findings": [{{"key": ...}}]}} file)',
                           line=1) from None  # fmt: skip


def apply_baseline(cases: list[Case], accepted: set[str]) -> list[Case]:
    """Each finding the baseline accepts marked ``baselined`` (it never fails the run)."""
    return [
        dataclasses.replace(
            case,
            findings=tuple(
                dataclasses.replace(f, baselined=f.key(case) in accepted) for f in case.findings
            ),
        )
        for case in cases
    ]
