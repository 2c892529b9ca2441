"""RunState: the one owner of a session's run flags (which run is current, pause, streaming,
over)."""

from __future__ import annotations

from app.web.runtime.runstate import RunState


def test_a_new_state_streams_nothing_and_a_pause_then_asks_nothing() -> None:
    runs = RunState()
    runs.pause()
    assert (runs.streaming, runs.paused, runs.over) == (False, False, False)


def test_a_started_run_streams_and_generates_until_paused() -> None:
    runs = RunState()
    run = runs.start()
    assert runs.streaming and runs.generating(run)
    runs.pause()
    assert runs.paused and not runs.generating(run)


def test_a_newer_run_takes_over_and_the_older_loop_leaving_changes_nothing() -> None:
    runs = RunState()
    old = runs.start()
    new = runs.start()
    assert not runs.current(old) and not runs.generating(old) and runs.generating(new)
    runs.end(old)
    runs.finish(old)
    assert runs.streaming and not runs.over


def test_a_run_over_stays_over_for_a_reconnect_and_a_fresh_start_clears_it() -> None:
    runs = RunState()
    first = runs.start()
    runs.pause()
    runs.end(first)
    runs.finish(first)
    assert (runs.streaming, runs.paused, runs.over) == (False, True, True)
    resumed = runs.start(resume=True)
    assert runs.streaming and runs.over and not runs.generating(resumed)
    runs.finish(resumed)
    fresh = runs.start()
    assert (runs.paused, runs.over) == (False, False) and runs.generating(fresh)


def test_a_pause_asked_before_a_reconnect_holds_for_it() -> None:
    runs = RunState()
    runs.start()
    runs.pause()
    resumed = runs.start(resume=True)
    assert runs.paused and not runs.generating(resumed)
