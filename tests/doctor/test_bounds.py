"""The Doctor's bounds: size caps before anything is allocated, and its worker processes (real
xgrammar, the real model's tokenizer, real spawned processes) killed on a stop, past the hard
limit, and on close."""

from __future__ import annotations

import json
import multiprocessing
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.doctor.instances import MAX_CHARS, MAX_ITEMS, InstanceDrawer, TooLarge
from app.doctor.worker import DoctorWorkers, Stop
from app.engine import CompileOptions, Engine, GrammarKind, GrammarSpec
from app.exceptions import CutShortByLoad, NotReady, RequestEnded
from app.settings import Settings

HUGE_STRING = {"type": "string", "minLength": 1_000_000_000}
#: 2000 arrays of at least 2000 integers each.
HUGE_ARRAYS = {
    "type": "array",
    "minItems": 2000,
    "items": {"type": "array", "minItems": 2000, "items": {"type": "integer"}},
}
#: Examined for minutes on aa2ae5c (a loop over the ``$anchor``), so it runs until stopped.
ANCHOR = {"$ref": "#bigint", "$defs": {"bigint": {"$anchor": "bigint", "maximum": 10}}}
#: Examined for several seconds (60 bounded arrays of unique items, each keyword proven): long
#: enough to be stopped while it runs.
SLOW = {
    "type": "object",
    "properties": {
        f"p{i}": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 100},
                  "maxItems": 3, "uniqueItems": True}
        for i in range(60)
    },
    "required": [f"p{i}" for i in range(60)],
}  # fmt: skip


def spec(schema: Any) -> GrammarSpec:
    return GrammarSpec(GrammarKind.JSON_SCHEMA, json.dumps(schema), CompileOptions())


def gone(pid: int) -> bool:
    """Whether no process has ``pid`` (it was killed and reaped)."""
    return not Path(f"/proc/{pid}").exists()


def wait_for(condition: Any, seconds: float = 120.0) -> None:
    """Wait for ``condition()`` (a process to start, a thread to end), failing after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "waited too long"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def workers(engine: Engine) -> Iterator[DoctorWorkers]:
    pool = DoctorWorkers(engine, Settings())
    yield pool
    pool.close()


@pytest.mark.parametrize(
    ("schema", "keyword"),
    [
        (HUGE_STRING, "minLength"),
        ({"type": "array", "minItems": 10**9}, "minItems"),
        ({"type": "object", "minProperties": 10**9}, "minProperties"),
        (HUGE_ARRAYS, "minItems"),
        # Each array within the caps, together far above them.
        ({"type": "array", "minItems": MAX_ITEMS,
          "items": {"type": "array", "minItems": 999, "items": {"type": "integer"}}}, "minItems"),
        ({"type": "array", "minItems": 50, "items": {"type": "string", "minLength": MAX_CHARS}},
         "minLength"),
    ],
)  # fmt: skip
def test_a_draw_above_a_cap_is_refused_before_it_is_built(schema: Any, keyword: str) -> None:
    with pytest.raises(TooLarge, match=keyword):
        InstanceDrawer(schema, random.Random(0)).draw()


def test_a_draw_within_the_caps_is_built() -> None:
    schema = {"type": "array", "minItems": 20, "items": {"type": "string", "minLength": 500}}
    drawn = InstanceDrawer(schema, random.Random(0)).draw()
    assert len(drawn) >= 20 and all(len(text) >= 500 for text in drawn)


def test_a_hostile_size_is_reported_not_built(workers: DoctorWorkers) -> None:
    for schema, keyword in ((HUGE_STRING, "minLength"), (HUGE_ARRAYS, "minItems")):
        # the work is bounded by counts; the budget is only the safety stop, which a loaded
        # machine reached at 2 s before the search got to the size (cut_short_by_load)
        report = workers.examine(
            spec(schema), seed=0, budget_ms=20_000, pydantic=None, max_tokens=None
        )
        assert report.search is not None
        assert any(keyword in note for note in report.search.too_large), report.search
        assert report.search.to_dict()["too_large"] == list(report.search.too_large)


def test_the_worker_report_is_the_in_process_report(engine: Engine, workers: DoctorWorkers) -> None:
    from app.doctor import Doctor

    tags = {"type": "array", "uniqueItems": True, "maxItems": 3,
            "items": {"type": "string", "maxLength": 4}}  # fmt: skip
    schema = {"type": "object", "properties": {"tags": tags}, "required": ["tags"]}
    in_process = Doctor.of(engine).examine(spec(schema), seed=3, budget_ms=20_000)
    in_worker = workers.examine(
        spec(schema), seed=3, budget_ms=20_000, pydantic=None, max_tokens=None
    )
    assert in_process.search is not None and not in_process.search.cut_short
    forget_times = {"ms": 0, "compile_ms": 0, "compile_ms_any_whitespace": 0}

    def timeless(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: forget_times.get(k, timeless(v)) for k, v in value.items()}
        if isinstance(value, list):
            return [timeless(v) for v in value]
        return value

    assert timeless(in_worker.to_dict()) == timeless(in_process.to_dict())


def test_a_bad_schema_is_the_same_error_as_in_process(workers: DoctorWorkers) -> None:
    bad = GrammarSpec(GrammarKind.JSON_SCHEMA, '{"type": "string",\n "minLength": -1}',
                      CompileOptions())  # fmt: skip
    with pytest.raises(Exception) as raised:
        workers.examine(bad, seed=0, budget_ms=500, pydantic=None, max_tokens=None)
    assert raised.value.code == "grammar_invalid", raised.value  # type: ignore[attr-defined]


def test_the_worker_address_space_is_capped(engine: Engine) -> None:
    pool = DoctorWorkers(engine, Settings(doctor_memory_mb=512))
    try:
        stop = Stop()
        pool.examine(spec({"type": "integer"}), seed=0, budget_ms=200, pydantic=None,
                     max_tokens=None, stop=stop)  # fmt: skip
        assert stop.pid is not None
        limits = Path(f"/proc/{stop.pid}/limits").read_text()
        line = next(row for row in limits.splitlines() if row.startswith("Max address space"))
        soft = line.split()[3]
        assert soft != "unlimited", line
        status = Path(f"/proc/{stop.pid}/status").read_text()
        mapped = next(int(r.split()[1]) for r in status.splitlines() if r.startswith("VmSize:"))
        # Capped near what it maps now plus the 512 MB (it has started threads since).
        assert int(soft) - mapped * 1024 <= 512 * 1024 * 1024
    finally:
        pool.close()


def run_in_thread(pool: DoctorWorkers, schema: Any, stop: Stop, budget_ms: int) -> dict[str, Any]:
    """Examine ``schema`` on a thread; the dict gets ``"error"`` or ``"report"`` when done."""
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["report"] = pool.examine(spec(schema), seed=0, budget_ms=budget_ms,
                                             pydantic=None, max_tokens=None, stop=stop)  # fmt: skip
        except Exception as error:
            outcome["error"] = error

    outcome["thread"] = threading.Thread(target=work, daemon=True)
    outcome["thread"].start()
    return outcome


def test_a_stop_kills_the_worker_at_once(workers: DoctorWorkers) -> None:
    stop = Stop()
    outcome = run_in_thread(workers, SLOW, stop, budget_ms=20_000)
    wait_for(lambda: stop.pid is not None and stop.pid in workers.busy_pids)
    pid = stop.pid
    assert pid is not None
    stop.set()
    outcome["thread"].join(timeout=60)
    assert isinstance(outcome.get("error"), RequestEnded), outcome
    assert gone(pid)
    assert pid not in workers.busy_pids


def test_past_the_safety_stop_the_worker_is_killed_cut_short_by_load(engine: Engine) -> None:
    """Its work is a fixed count: only load takes it past the stop, never the schema."""
    pool = DoctorWorkers(engine, Settings(), hard_limit=lambda budget_ms: 0.0)
    try:
        stop = Stop()
        with pytest.raises(CutShortByLoad, match="cut short by load"):
            pool.examine(spec(SLOW), seed=0, budget_ms=2000, pydantic=None, max_tokens=None,
                         stop=stop)  # fmt: skip
        assert stop.pid is not None and gone(stop.pid)
    finally:
        pool.close()


def test_close_kills_a_running_examination(engine: Engine) -> None:
    pool = DoctorWorkers(engine, Settings())
    stop = Stop()
    outcome = run_in_thread(pool, SLOW, stop, budget_ms=20_000)
    wait_for(lambda: stop.pid is not None and stop.pid in pool.busy_pids)
    pid = stop.pid
    assert pid is not None
    pool.close()
    assert gone(pid)
    outcome["thread"].join(timeout=60)
    assert isinstance(outcome.get("error"), NotReady), outcome
    with pytest.raises(NotReady):
        pool.examine(spec({"type": "integer"}), seed=0, budget_ms=200, pydantic=None,
                     max_tokens=None)  # fmt: skip


def test_a_client_leaving_while_the_process_starts_leaves_it_to_the_next(engine: Engine) -> None:
    """A fast typist's examinations, each left before its process has started, must not each
    kill the starting process and start another (the queue then fills with waits)."""
    pool = DoctorWorkers(engine, Settings())
    try:
        before = {child.pid for child in multiprocessing.active_children()}
        left = Stop()
        outcome = run_in_thread(pool, {"type": "integer"}, left, budget_ms=2000)
        wait_for(lambda: {c.pid for c in multiprocessing.active_children()} - before)
        [starting] = {c.pid for c in multiprocessing.active_children()} - before
        left.set()
        outcome["thread"].join(timeout=60)
        assert isinstance(outcome.get("error"), RequestEnded), outcome
        stop = Stop()
        pool.examine(spec({"type": "integer"}), seed=0, budget_ms=2000, pydantic=None,
                     max_tokens=None, stop=stop)  # fmt: skip
        assert stop.pid == starting
    finally:
        pool.close()
