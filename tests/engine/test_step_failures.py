"""A step that fails anywhere leaves the session exactly as it was before that step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from app.engine import Engine, SamplingParams, Session
from tests.engine.conftest import nested_session


class Injected(RuntimeError):
    """The failure the tests inject."""


def _fail_once(obj: Any, name: str, *, after_real_call: bool, when: Callable[[], bool]) -> None:
    """Patch ``obj.name`` to raise once, when ``when()`` holds (after the real call, if told)."""
    real = getattr(obj, name)
    fired = False

    def patched(*args: Any, **kwargs: Any) -> Any:
        nonlocal fired
        if fired or not when():
            return real(*args, **kwargs)
        fired = True
        if after_real_call:
            real(*args, **kwargs)
        raise Injected(f"injected into {name}")

    setattr(obj, name, patched)


# Each point comes after the forward pass: the KV cache already holds the step's input.
# (engine attribute of the session, method, whether the real call happens before the failure)
POINTS = {
    # the sampler, on the logits (the CUDA bug failed here)
    "choose": ("_forward", "choose", False),
    # in the probe, once a token was accepted and rolled back
    "probe": ("_masking", "probe_token", True),
    # after the matcher accepted the token (the next thing the step asks it)
    "accepted": ("_masking", "is_terminated", False),
    # the last thing a step does: the prefix already grew by the token
    "extend": ("_forward", "extend", True),
}


def _inject(session: Session, point: str, index: int) -> None:
    attribute, name, after = POINTS[point]
    target = getattr(session, attribute)
    _fail_once(target, name, after_real_call=after, when=lambda: len(session.steps) == index)


@pytest.fixture(scope="module")
def greedy(engine: Engine) -> list[dict[str, Any]]:
    """The first ten records of an undisturbed greedy session, timings aside."""
    return [r.without_timings() for r in nested_session(engine).run(10)]


@pytest.mark.parametrize("index", [0, 6])
@pytest.mark.parametrize("point", sorted(POINTS))
def test_a_failed_step_leaves_no_trace(
    engine: Engine, greedy: list[dict[str, Any]], point: str, index: int
) -> None:
    undisturbed = greedy[: index + 4]
    session = nested_session(engine)
    session.run(index)
    kv_before = session.kv_bytes
    _inject(session, point, index)
    with pytest.raises(Injected):
        session.step()
    assert [r.without_timings() for r in session.steps] == undisturbed[:index]
    assert session.kv_bytes <= kv_before and not session.done
    session.run(4)
    assert [r.without_timings() for r in session.steps] == undisturbed


def test_a_run_keeps_the_steps_before_the_failure(engine: Engine) -> None:
    sampling = SamplingParams(temperature=1.0, seed=99)
    undisturbed = [r.without_timings() for r in nested_session(engine, sampling=sampling).run(12)]
    session = nested_session(engine, sampling=sampling)
    _inject(session, "accepted", 5)
    with pytest.raises(Injected):
        session.run(12)
    assert [r.without_timings() for r in session.steps] == undisturbed[:5]
    session.run(7)
    assert [r.without_timings() for r in session.steps] == undisturbed


def test_a_failed_forced_step_leaves_no_trace(engine: Engine, greedy: list[dict[str, Any]]) -> None:
    session = nested_session(engine)
    session.run(2)
    token = greedy[2]["token_id"]
    _inject(session, "accepted", 2)
    with pytest.raises(Injected):
        session.force(token)
    assert len(session.steps) == 2
    forced = session.force(token)
    assert {**forced.without_timings(), "forced": False} == greedy[2]


def test_a_forward_pass_that_fails_halfway_is_repaired(
    engine: Engine, greedy: list[dict[str, Any]]
) -> None:
    layers = engine.model.model.model.layers
    middle = layers[len(layers) // 2]
    session = nested_session(engine)
    session.run(4)
    # The layers before the middle one have already grown their cache when it fails.
    _fail_once(middle, "forward", after_real_call=False, when=lambda: True)
    try:
        with pytest.raises(Injected):
            session.step()
    finally:
        del middle.forward  # back to the class's forward
    session.run(4)
    assert [r.without_timings() for r in session.steps] == greedy[:8]
