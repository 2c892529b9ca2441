"""``python -m app doctor``: is the schema enforced as written; what each serving stack does."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from app.cli.options import (
    add_grammar_arguments,
    grammar_request,
    load_engine,
)
from app.settings import Settings

if TYPE_CHECKING:
    from app.doctor import DoctorReport

__all__ = ["BACKENDS", "HELP", "NAME", "add_arguments", "report_text", "run"]

NAME = "doctor"
HELP = "is the schema enforced as written; what each serving stack does with it"

BACKENDS = ("xgrammar", "vllm", "sglang", "llguidance", "openai_strict")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``doctor``'s flags."""
    add_grammar_arguments(parser)
    parser.add_argument(
        "--backend", action="append", choices=BACKENDS, default=[],
        help="exit 1 when this stack refuses the schema or falls back (repeatable)",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="the witness search's seed")
    parser.add_argument(
        "--budget-ms",
        type=int,
        help="each part's wall-clock safety stop (default 20000; the work is bounded by counts)",
    )
    parser.add_argument("--max-tokens", type=int, help="flag it when below the shortest document")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Examine the schema; exit 1 when a keyword is ignored or weakened, or a ``--backend``
    refuses it or falls back, else 0."""
    from app.doctor import DEFAULT_BUDGET_MS, Doctor, Status, Verdict

    request = grammar_request(args, settings)
    engine = load_engine(args, settings)
    try:
        report = Doctor.of(engine).examine(
            request.spec, seed=args.seed, budget_ms=args.budget_ms or DEFAULT_BUDGET_MS,
            pydantic=request.pydantic, max_tokens=args.max_tokens,
        )  # fmt: skip
    finally:
        engine.close()
    print(json.dumps(report.to_dict(), indent=2) if args.json else report_text(report))
    weak = any(k.status in (Status.IGNORED, Status.WEAKENED) for k in report.keywords)
    refused = any(
        row.backend in args.backend and row.verdict in (Verdict.REFUSES, Verdict.FALLS_BACK)
        for row in report.backends
    )
    return 1 if weak or refused else 0


def report_text(report: DoctorReport) -> str:
    """The report for a terminal: flagged keywords, witnesses, one line per stack, costs."""
    lines: list[str] = []
    if report.keywords:
        counts = ", ".join(f"{n} {status}" for status, n in report.counts().items() if n)
        lines.append(f"keywords: {counts}")
        lines += [
            f"  {k.status.value:<9} {k.pointer}{f' (line {k.line})' if k.line else ''}: {k.detail}"
            for k in report.keywords
            if k.status.value != "enforced"
        ]
    if report.search:
        search = report.search
        lines.append(
            f"witnesses: {len(report.witnesses)} (seed {search.seed}, "
            f"{search.grammar_documents + search.schema_documents} documents, {search.ms:.0f} ms"
            f"{', cut short' if search.cut_short else ''})"
        )
    for witness in report.witnesses:
        where = f" at offset {witness.refusal.offset}" if witness.refusal else ""
        lines.append(f"  {witness.direction.value}{where}: {witness.text}")
        lines += [f"      {e.path}: {e.message}" for e in witness.errors]
    lines.append("backends:")
    for row in report.backends:
        lines.append(f"  {row.backend:<14} {row.verdict.value:<11} {row.rules_version}")
        lines += [
            f"      - {m.message}{f' ({m.pointer})' if m.pointer else ''}" for m in row.messages
        ]
    lines.append(_costs_line(report))
    return "\n".join(lines)


def _costs_line(report: DoctorReport) -> str:
    costs = report.costs
    spaced = costs.compile_ms_any_whitespace
    shortest = costs.shortest_document_tokens
    return (
        f"costs: compile {costs.compile_ms:.1f} ms"
        f"{f' ({spaced:.1f} ms with any_whitespace)' if spaced is not None else ''}, "
        f"{costs.size_bytes:,} bytes, shortest document "
        f"{f'<= {shortest} tokens' if shortest is not None else 'not found'}"
        f"{' (above --max-tokens)' if costs.max_tokens_below_shortest else ''}, "
        f"unbounded whitespace: {'possible' if costs.unbounded_whitespace else 'no'}"
    )
