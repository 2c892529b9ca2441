"""The Suite view's runs: a suite checked by :mod:`app.suite`'s
:class:`~app.suite.checker.Checker` source by source on the Doctor's queue (shared fairly between
clients), its progress told to the pages that watch it, its report kept in the store under its
content-addressed id (:func:`app.web.services.suite_upload.suite_id`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.doctor import DoctorReport, PydanticSource
from app.engine import AnyEngine, GrammarSpec
from app.exceptions import CapacityExceeded, MaskscopeError, PermalinkNotFound
from app.settings import Settings
from app.suite import Case, CheckOptions, SuiteReport
from app.suite.checker import Checker, Examine
from app.suite.config import DEFAULT_FAIL_ON
from app.suite.discovery import Source
from app.web.runtime.state import AppState

__all__ = ["SUITE_VERSION", "SuiteRun", "SuiteRuns", "found", "runs_of", "start", "stored"]

log = logging.getLogger(__name__)

SUITE_VERSION = 1
#: How long a source refused by a full Doctor's queue waits before it asks again.
_RETRY_S = 0.5


@dataclass
class SuiteRun:
    """A suite being checked: its sources, the cases so far, and the events told so far.

    Attributes:
        id: the suite's id.
        client: who uploaded it (the per-client cap).
        sources: what is checked, in order.
        stacks: the stacks checked against.
        engines: the engines checked with.
        options: the options every case is checked with.
        cases: the cases checked so far.
        events: every event so far (``progress``, then ``end``), each ``(name, data)``.
        unchecked: the sources left unchecked (the time limit passed, the server stopped).
        finished: the run is over (its ``end`` event told).
        kept: the store keeps its report (its link outlives this process).
        error: why it ended early, or was not kept (the API's error object).
    """

    id: str
    client: str
    sources: list[Source]
    stacks: tuple[str, ...]
    engines: tuple[str, ...]
    options: CheckOptions
    cases: list[Case] = field(default_factory=list)
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)
    finished: bool = False
    kept: bool = False
    error: dict[str, Any] | None = None
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def tell(self, name: str, data: dict[str, Any]) -> None:
        """Add an event and wake whoever waits for one."""
        self.events.append((name, data))
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def wait(self, seen: int, timeout: float) -> None:
        """Wait until there are more than ``seen`` events, or ``timeout`` passes."""
        if len(self.events) > seen or self.finished:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout)

    def report(self) -> SuiteReport:
        """The report of the cases so far."""
        return SuiteReport(tuple(self.cases), DEFAULT_FAIL_ON)

    def content(self) -> dict[str, Any]:
        """What the store keeps: the sources, what they were checked with, the report."""
        return {
            "version": SUITE_VERSION,
            "sources": [
                {"name": s.name, "kind": s.kind, "text": s.text, "tests": s.tests}
                for s in self.sources
            ],
            "stacks": list(self.stacks),
            "engines": list(self.engines),
            "options": {
                "preset": self.options.preset,
                "seed": self.options.seed,
                "budget_ms": self.options.budget_ms,
                "model": self.options.model,
            },
            "unchecked": list(self.unchecked),
            "report": self.report().to_dict(),
        }


class SuiteRuns:
    """The suites being checked in this process (and the finished ones the store could not
    keep, the last few), by id.

    Args:
        settings: the caps.
    """

    #: Finished suites kept in memory when the store did not take them.
    UNKEPT = 16

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.runs: dict[str, SuiteRun] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def get(self, suite_id: str) -> SuiteRun | None:
        """The run with this id, if this process has it."""
        return self.runs.get(suite_id)

    def admit(self, client: str) -> None:
        """Refuse a new suite past the caps (429).

        Raises:
            CapacityExceeded: too many suites running, on the server or for this client.
        """
        running = [r for r in self.runs.values() if not r.finished]
        if len(running) >= self.settings.suite_max_running:
            raise CapacityExceeded(
                f"{len(running)} suites are being checked (at most "
                f"{self.settings.suite_max_running} at once); try again in a moment"
            )
        mine = sum(r.client == client for r in running)
        if mine >= self.settings.suite_max_running_per_client:
            raise CapacityExceeded(
                f"{mine} of your suites are being checked (at most "
                f"{self.settings.suite_max_running_per_client} a client); try again when it "
                "is done"
            )

    def add(self, run: SuiteRun, work: Callable[[SuiteRun], Any]) -> None:
        """Start checking ``run`` in the background."""
        self.runs[run.id] = run
        task = asyncio.get_running_loop().create_task(work(run))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def settle(self, run: SuiteRun) -> None:
        """Forget a finished run the store keeps; keep the last few it could not."""
        if run.kept:
            self.runs.pop(run.id, None)
            return
        unkept = [r for r in self.runs.values() if r.finished and not r.kept]
        for old in unkept[: max(0, len(unkept) - self.UNKEPT)]:
            self.runs.pop(old.id, None)

    def close(self) -> None:
        """Cancel every run (the server stops)."""
        for task in list(self._tasks):
            task.cancel()


def runs_of(state: AppState, holder: Any) -> SuiteRuns:
    """The app's suite runs, made on first use and kept on ``holder`` (the app's ``state``);
    the server's stop cancels them."""
    runs: SuiteRuns | None = getattr(holder, "suite_runs", None)
    if runs is None:
        runs = SuiteRuns(state.settings)
        holder.suite_runs = runs
        state.shutdown.add_hook("suites", runs.close)
    return runs


def stored(state: AppState, suite_id: str) -> dict[str, Any]:
    """A kept suite's content (blocking: call it off the event loop).

    Raises:
        PermalinkNotFound: no suite has this id.
    """
    well_formed = re.fullmatch(r"[A-Za-z0-9_-]{12,16}", suite_id) is not None
    found = state.store.get_suite(suite_id) if well_formed else None
    if found is None:
        raise PermalinkNotFound(
            f"no suite {suite_id!r} here: check the link, or upload the suite again"
        )
    return found[0]


async def _on_queue(
    state: AppState, checker: Checker, run: SuiteRun, source: Source, deadline: float
) -> list[Case] | None:
    """One source checked on a thread of the Doctor's pool (shared fairly between clients),
    asked again while the queue is full; None when the deadline passes first."""
    while True:
        try:
            return await state.pools.doctors.run(checker.check, [source], run.stacks, run.engines)
        except CapacityExceeded:
            if time.monotonic() + _RETRY_S > deadline:
                return None
            await asyncio.sleep(_RETRY_S)


def _in_workers(state: AppState, run: SuiteRun) -> Examine:
    """The Doctor's examination of an uploaded source in its killable, memory-capped worker
    processes, as ``POST /api/doctor`` runs it: never in the server's own threads, where a
    hostile grammar could hold a thread or grow without bound."""

    def examine(
        engine: AnyEngine, spec: GrammarSpec, pydantic: PydanticSource | None
    ) -> DoctorReport:
        workers = state.pools.doctor_workers.of(engine)
        return workers.examine(
            spec, seed=run.options.seed, budget_ms=run.options.budget_ms, pydantic=pydantic,
            max_tokens=None,
        )  # fmt: skip

    return examine


async def _check(
    state: AppState, runs: SuiteRuns, run: SuiteRun, render: Callable[[SuiteRun, Source], str]
) -> None:
    checked = 0
    try:
        engine = state.require_engine()
        # Never closed: the engine is the app's.
        checker = Checker(
            state.settings, run.options, lambda: engine, jobs=1, examine=_in_workers(state, run)
        )
        deadline = time.monotonic() + state.settings.suite_time_limit_s
        for source in run.sources:
            cases = (
                None
                if time.monotonic() > deadline
                else await _on_queue(state, checker, run, source, deadline)
            )
            if cases is None:
                break
            run.cases += cases
            checked += 1
            run.tell(
                "progress",
                {
                    "done": checked,
                    "total": len(run.sources),
                    "source": source.name,
                    "row": render(run, source),
                },
            )
    except MaskscopeError as error:  # the server stops, the model is not ready
        run.error = error.to_dict()
    except Exception:  # a bug: the page is told, never left waiting
        log.exception("suite %s: the check failed", run.id)
        run.error = MaskscopeError("the check failed (see the server's log)").to_dict()
    run.unchecked = [s.name for s in run.sources[checked:]]
    await _finish(state, runs, run)


async def _finish(state: AppState, runs: SuiteRuns, run: SuiteRun) -> None:
    if not run.unchecked:  # a report cut short is shown, never kept under the suite's id
        try:
            await asyncio.to_thread(
                state.store.put_suite,
                run.id,
                run.content(),
                max_bytes=state.settings.suite_report_max_bytes,
            )
            run.kept = True
        except MaskscopeError as failed:  # too large, or the store is down: shown, not kept
            run.error = failed.to_dict()
    report = run.report().to_dict()
    run.finished = True
    run.tell(
        "end",
        {
            "done": len(run.sources) - len(run.unchecked),
            "total": len(run.sources),
            "summary": report["summary"],
            "unchecked": run.unchecked,
            "cut_short": bool(run.unchecked),
            "kept": run.kept,
            "error": run.error,
        },
    )
    runs.settle(run)


def start(
    state: AppState, runs: SuiteRuns, run: SuiteRun, render: Callable[[SuiteRun, Source], str]
) -> None:
    """Check ``run`` in the background: its sources one at a time on the Doctor's queue, an
    event for each, then the report kept and the ``end`` event."""
    runs.add(run, lambda r: _check(state, runs, r, render))


async def found(state: AppState, runs: SuiteRuns, suite_id: str) -> dict[str, Any]:
    """What the suite is now: the run in this process, or the kept one, as ``{"id", "status",
    "done", "total", "unchecked", "kept", "error", "stacks", "engines", "sources", "report"}``.

    Raises:
        PermalinkNotFound: no suite has this id.
    """
    run = runs.get(suite_id)
    if run is not None:
        status = "cut_short" if run.unchecked else "done" if run.finished else "running"
        return {
            "id": suite_id,
            "status": status,
            "done": len({c.source for c in run.cases}),
            "total": len(run.sources),
            "unchecked": run.unchecked,
            "kept": run.kept,
            "error": run.error,
            "stacks": list(run.stacks),
            "engines": list(run.engines),
            "sources": [{"name": s.name, "kind": s.kind} for s in run.sources],
            "report": run.report().to_dict(),
        }
    content = await asyncio.to_thread(stored, state, suite_id)
    total = len(content["sources"])
    return {
        "id": suite_id,
        "status": "done",
        "done": total,
        "total": total,
        "unchecked": [],
        "kept": True,
        "error": None,
        "stacks": content["stacks"],
        "engines": content["engines"],
        "sources": [{"name": s["name"], "kind": s["kind"]} for s in content["sources"]],
        "report": content["report"],
    }
