"""xgrammar's row: this very compile, its warnings, the keywords it ignores or weakens, and what
``strict_mode`` does to properties the schema does not declare."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Sequence

from app.doctor.records import BackendRow, KeywordFinding, Message, Status, Verdict

__all__ = ["RULES_VERSION", "assess"]

RULES_VERSION = f"xgrammar {importlib.metadata.version('xgrammar')} (this compile)"


def assess(
    findings: Sequence[KeywordFinding],
    warnings: Sequence[str],
    *,
    strict_example: str | None,
    weaker: int,
    stricter: int,
) -> BackendRow:
    """The row for the compile the page shows.

    Args:
        findings: every keyword's status.
        warnings: the lines xgrammar printed while compiling.
        strict_example: a schema-valid document refused only for undeclared properties.
        weaker: witnesses the grammar accepts and the schema rejects.
        stricter: witnesses the schema accepts and the grammar refuses.
    """
    messages = [Message(f"warning: {line}") for line in warnings]
    weak = [f for f in findings if f.status in (Status.IGNORED, Status.WEAKENED)]
    messages += [Message(f"{f.keyword} {f.status.value}", f.pointer) for f in weak]
    if weaker:
        messages.append(Message(f"accepts {weaker} document(s) the schema rejects: see witnesses"))
    if stricter:
        messages.append(
            Message(f"refuses {stricter} document(s) the schema accepts: see witnesses")
        )
    if strict_example is not None:
        messages.append(
            Message(
                "strict_mode: properties the schema does not declare are refused, though the "
                f"schema allows them (e.g. {strict_example})"
            )
        )
    verdict = Verdict.IGNORES if weak or weaker else Verdict.OK
    return BackendRow("xgrammar", RULES_VERSION, verdict, tuple(messages) or (Message("ok"),))
