"""A permalink's tests judged in the background, never on a GET's path.

A GET of a permalink reads the verdicts its tests were last judged with here (kept beside the
snapshot: :meth:`~app.store.base.SnapshotStore.get_verdicts`). When there are none yet (a
permalink shared before they were kept) or they were judged with another model, library or
walk budget than this server's, the GET answers each test with ``"status": "pending"`` (and the
verdicts kept, if any) and schedules one judgement: in the app's bounded pools, charged to the
client whose GET scheduled it, under a CPU-time walk budget (a walk past it is kept as the
error ``grammar_too_slow``, never a hang). Once kept, later GETs read the final verdicts.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Sequence
from typing import Any

from app.engine import AnyEngine
from app.engine.budget import WalkBudget
from app.engine.grammars.llguidance import VERSION as LLGUIDANCE_VERSION
from app.exceptions import (
    CapacityExceeded,
    MaskscopeError,
    NotReady,
    RequestEnded,
    ShuttingDown,
    SnapshotTooLarge,
    StoreUnavailable,
)
from app.schematests import SchemaTestResult
from app.web.runtime.state import AppState
from app.web.schemas.bodies import GrammarIn, SchemaTestIn
from app.web.services import schema_tests

__all__ = [
    "ERROR",
    "JUDGED",
    "PENDING",
    "Rejudging",
    "current",
    "judge_key",
    "kept",
    "rejudging",
    "results",
    "walk_budget",
]

log = logging.getLogger(__name__)

#: A test's ``status`` in ``test_results``: its verdict is being judged again (the one shown,
#: if any, is the last kept); judged here with this server's model and libraries; or not
#: judged, with the error that says why (``grammar_too_slow``...).
PENDING, JUDGED, ERROR = "pending", "judged", "error"

#: Errors that say nothing of the tests (the server is busy, stopping, or cannot reach its
#: store): nothing is kept, and a later GET schedules the judgement again.
_TRANSIENT = (CapacityExceeded, ShuttingDown, NotReady, StoreUnavailable, RequestEnded)


def judge_key(state: AppState, engine: AnyEngine) -> dict[str, Any]:
    """What a verdict judged here depends on: the model, the libraries, the walk budget."""
    return {
        **engine.model.identity.to_dict(),
        "llguidance": LLGUIDANCE_VERSION,
        "walk_budget_s": state.settings.walk_budget_s,
    }


def walk_budget(state: AppState, what: str) -> WalkBudget:
    """A budget for the walks of one judgement (:meth:`WalkBudget.running` it around the
    awaited call: the pools copy its context into their threads)."""
    return WalkBudget(state.settings.walk_budget_s, what=what)


def kept(key: dict[str, Any], judged: Sequence[SchemaTestResult]) -> dict[str, Any]:
    """The verdicts a store keeps for tests judged with ``key``."""
    return {
        "judged_with": key,
        "results": [{**r.to_dict(), "verdicts": r.verdicts()} for r in judged],
    }


def _failed(key: dict[str, Any], error: MaskscopeError) -> dict[str, Any]:
    return {"judged_with": key, "error": error.to_dict()}


def current(verdicts: dict[str, Any] | None, key: dict[str, Any], count: int) -> bool:
    """Whether kept verdicts are this server's final ones for ``count`` tests (judged with
    ``key``); if not, they are judged again."""
    if verdicts is None or verdicts.get("judged_with") != key:
        return False
    return "error" in verdicts or len(verdicts.get("results") or []) == count


def results(
    tests: Sequence[dict[str, Any]], verdicts: dict[str, Any] | None, *, pending: bool
) -> list[dict[str, Any]]:
    """``test_results``: each test of a snapshot with the verdict kept for it (none yet: only
    its text, expectation and share-time ``recorded``) and its ``status`` (``pending`` while
    they are judged again); ``differs`` says a kept verdict is not the one recorded at share
    time."""
    found = (verdicts or {}).get("results")
    if found is not None and len(found) != len(tests):
        found = None  # kept for other tests: none of them applies
    error = (verdicts or {}).get("error")
    status = PENDING if pending or verdicts is None else ERROR if error else JUDGED
    out = []
    for index, test in enumerate(tests):
        row = {"text": test["text"], "expect": test["expect"], "recorded": test.get("recorded")}
        if found is not None:
            judged = {k: v for k, v in found[index].items() if k != "verdicts"}
            differs = test.get("recorded") != found[index]["verdicts"]
            row = {**judged, **row, "differs": differs}
        elif error is not None:
            row["error"] = error
        out.append({**row, "status": status})
    return out


class Rejudging:
    """The background judgements of one app: one per snapshot at a time, ``limit`` at most
    (past it a GET schedules nothing; a later one will)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._budgets: set[WalkBudget] = set()

    @property
    def in_flight(self) -> int:
        """Judgements scheduled and not over."""
        return len(self._tasks)

    def schedule(
        self,
        state: AppState,
        engine: AnyEngine,
        snapshot_id: str,
        snapshot: dict[str, Any],
    ) -> bool:
        """Judge a snapshot's tests in the background (in the caller's context: its client's
        share of the pools), unless they are being judged already; whether one was started."""
        if snapshot_id in self._tasks or len(self._tasks) >= self.limit:
            return False
        task = asyncio.create_task(self._judge(state, engine, snapshot_id, snapshot))
        self._tasks[snapshot_id] = task
        task.add_done_callback(lambda _: self._tasks.pop(snapshot_id, None))
        return True

    def cancel(self) -> None:
        """Stop every walk at its next checkpoint (the server is stopping)."""
        for budget in list(self._budgets):
            budget.cancel()

    async def _judge(
        self, state: AppState, engine: AnyEngine, snapshot_id: str, snapshot: dict[str, Any]
    ) -> None:
        key = judge_key(state, engine)
        grammar = GrammarIn.model_validate(snapshot["request"]["grammar"])
        tests = [SchemaTestIn(text=t["text"], expect=t["expect"]) for t in snapshot["tests"]]
        budget = walk_budget(state, "the permalink's tests")
        self._budgets.add(budget)
        try:
            with budget.running():  # the pools copy this context into their threads
                verdicts = kept(key, await schema_tests.run(state, engine, grammar, tests))
        except _TRANSIENT as busy:
            log.info("permalink %s: tests not judged now: %s", snapshot_id, busy.message)
            return
        except MaskscopeError as error:  # the tests' own answer here: kept as such
            verdicts = _failed(key, error)
        except Exception:  # never the GET's answer: logged, and judged again on a later GET
            log.exception("permalink %s: judging its tests failed", snapshot_id)
            return
        finally:
            self._budgets.discard(budget)
        await _keep(state, snapshot_id, key, verdicts)


async def _keep(
    state: AppState, snapshot_id: str, key: dict[str, Any], verdicts: dict[str, Any]
) -> None:
    try:
        if not await asyncio.to_thread(state.store.put_verdicts, snapshot_id, verdicts):
            too_large = SnapshotTooLarge("the tests' verdicts are larger than a permalink keeps")
            await asyncio.to_thread(state.store.put_verdicts, snapshot_id, _failed(key, too_large))
    except StoreUnavailable as error:
        log.warning("permalink %s: verdicts not kept: %s", snapshot_id, error.message)


_BY_APP: weakref.WeakKeyDictionary[AppState, Rejudging] = weakref.WeakKeyDictionary()


def rejudging(state: AppState) -> Rejudging:
    """The app's background judgements (made on first use; stopped with the server)."""
    found = _BY_APP.get(state)
    if found is None:
        found = _BY_APP[state] = Rejudging(limit=max(1, state.settings.queue_max))
        state.shutdown.add_hook("permalink tests", found.cancel)
    return found
