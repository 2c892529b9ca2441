"""The Doctor's end-of-generation finding: where a document is complete, is the model's end
token an allowed stop? (vLLM #51693: the grammar refused the EOS right after complete JSON, an
HTTP 500; #52153: the model's EOS list was not passed to xgrammar.)"""

from __future__ import annotations

import dataclasses
from typing import Any

from app.doctor.records import Direction, DoctorReport, Finding
from app.engine.grammars.spec import CompileResult
from app.engine.stepper.replay import replay
from app.engine.stepper.stops import EndRules, end_walk
from app.engine.tokens import Tokens

__all__ = ["NEVER_ENDS", "end_finding", "with_end_finding"]

NEVER_ENDS = (
    "after the shortest complete document the grammar allows no stop token: the model's end "
    "token is refused there (vLLM #51693: an HTTP 500)"
)


def end_finding(
    grammar: CompileResult, tokens: Tokens, model: Any, document: str | None
) -> Finding | None:
    """The finding on ``document`` (a complete document of the grammar), or None when the
    model's end tokens are all allowed where it can end (or there is no document to walk)."""
    if not document:
        return None
    walk = end_walk(grammar, tokens, EndRules(), model=model)
    walked = replay(grammar, tokens, text=document, end=walk)
    if not walked.accepted:
        return None
    report = walk.report()
    note = f"stop ids: {report.stops.source}; vLLM passes {list(report.stops.to_xgrammar)}"
    if report.unallowed_end is not None:
        cause = report.unallowed_end.message
    elif report.can_end_at is None:
        cause = NEVER_ENDS
    else:
        return None
    return Finding(
        cause=cause,
        direction=Direction.SCHEMA_ACCEPTS.value,
        keywords=(),
        pointers=(),
        count=1,
        example=document,
        span=(len(document), len(document)),
        note=note,
    )


def with_end_finding(
    report: DoctorReport, grammar: CompileResult, tokens: Tokens, model: Any
) -> DoctorReport:
    """``report`` with the end-of-generation finding added, if there is one (on its shortest
    document)."""
    found = end_finding(grammar, tokens, model, report.costs.shortest_document)
    if found is None:
        return report
    return dataclasses.replace(report, findings=(*report.findings, found))
