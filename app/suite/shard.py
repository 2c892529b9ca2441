"""Split a suite for a CI matrix (``--shard I/N``) and join the shards' JSON reports
(``check merge``): the CI matrix is what spreads a large suite over machines."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence

from app.exceptions import InvalidInput
from app.suite.discovery import Source
from app.suite.records import Level, SuiteReport

__all__ = ["in_shard", "merge", "parse_shard"]


def parse_shard(text: str) -> tuple[int, int]:
    """``"I/N"`` as ``(I, N)``, 1 <= I <= N.

    Raises:
        InvalidInput: anything else.
    """
    index, _, total = text.partition("/")
    if not (index.isdigit() and total.isdigit()) or not 1 <= int(index) <= int(total):
        raise InvalidInput(f"--shard {text!r}: give I/N with 1 <= I <= N, e.g. 2/4")
    return int(index), int(total)


def in_shard(sources: Sequence[Source], shard: tuple[int, int]) -> list[Source]:
    """The sources of shard ``I/N``: each source's shard comes from a hash of its name, so a
    source stays in its shard when others are added or removed."""
    index, total = shard
    return [
        s for s in sources
        if int(hashlib.sha256(s.name.encode()).hexdigest()[:8], 16) % total == index - 1
    ]  # fmt: skip


def merge(reports: Sequence[SuiteReport]) -> SuiteReport:
    """The shards' reports as one, cases sorted as an unsharded run sorts them.

    Raises:
        InvalidInput: no report, reports of different ``--fail-on``, or a case in two shards.
    """
    if not reports:
        raise InvalidInput("check merge: give the shards' JSON reports")
    fail_on = reports[0].fail_on
    if any(r.fail_on != fail_on for r in reports):
        raise InvalidInput("check merge: the shards were run with different --fail-on")
    cases = [case for report in reports for case in report.cases]
    twice = sorted(i for i, n in Counter(case.id for case in cases).items() if n > 1)
    if twice:
        raise InvalidInput(f"check merge: {twice[0]} is in two shards")
    order = sorted(range(len(cases)), key=lambda i: cases[i].source)
    return SuiteReport(tuple(cases[i] for i in order), tuple(Level(v) for v in fail_on))
