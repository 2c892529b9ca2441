"""A step that fails anywhere leaves the session exactly as it was before that step."""

from __future__ import annotations

from typing import Any

import pytest

from app.engine import Engine, SamplingParams, Session
from tests.engine.conftest import faulty_nested_session, nested_session
from tests.engine.faults import Fault, Injected

# Each point comes after the forward pass: the KV cache already holds the step's input.
# (method of the forward or masking engine, whether the real call happens before the failure)
POINTS = {
    # the sampler, on the logits (the CUDA bug failed here)
    "choose": ("choose", False),
    # in the probe, once a token was accepted and rolled back
    "probe": ("probe_token", True),
    # after the matcher accepted the token (the next thing the step asks it)
    "accepted": ("is_terminated", False),
    # the last thing a step does: the prefix already grew by the token
    "extend": ("extend", True),
}


def _session_failing(
    engine: Engine, point: str, index: int, sampling: SamplingParams | None = None
) -> Session:
    """A nested session whose engines fail once at ``point``, during step ``index``."""
    method, after = POINTS[point]
    made: list[Session] = []  # the fault asks the session it is built into
    fault = Fault(method, when=lambda: len(made[0].steps) == index, after_real_call=after)
    made.append(faulty_nested_session(engine, fault, sampling=sampling))
    return made[0]


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
    session = _session_failing(engine, point, index)
    session.run(index)
    kv_before = session.kv_bytes
    with pytest.raises(Injected):
        session.step()
    assert [r.without_timings() for r in session.steps] == undisturbed[:index]
    assert session.kv_bytes <= kv_before and not session.done
    session.run(4)
    assert [r.without_timings() for r in session.steps] == undisturbed


def test_a_run_keeps_the_steps_before_the_failure(engine: Engine) -> None:
    sampling = SamplingParams(temperature=1.0, seed=99)
    undisturbed = [r.without_timings() for r in nested_session(engine, sampling=sampling).run(12)]
    session = _session_failing(engine, "accepted", 5, sampling)
    with pytest.raises(Injected):
        session.run(12)
    assert [r.without_timings() for r in session.steps] == undisturbed[:5]
    session.run(7)
    assert [r.without_timings() for r in session.steps] == undisturbed


def test_a_failed_forced_step_leaves_no_trace(engine: Engine, greedy: list[dict[str, Any]]) -> None:
    session = _session_failing(engine, "accepted", 2)
    session.run(2)
    token = greedy[2]["token_id"]
    with pytest.raises(Injected):
        session.force(token)
    assert len(session.steps) == 2
    forced = session.force(token)
    assert {**forced.without_timings(), "forced": False} == greedy[2]


def _fail(module: Any, args: Any) -> None:
    raise Injected("injected into a layer's forward pass")


def test_a_forward_pass_that_fails_halfway_is_repaired(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Through the modules, layer by layer (the GGUF kernels' decoder writes every layer's cache
    # in one call, or none: it cannot fail halfway), the undisturbed records too.
    monkeypatch.setattr(engine.model.batcher, "_decoder", None)
    greedy = [r.without_timings() for r in nested_session(engine).run(8)]
    layers = engine.model.model.model.layers
    middle = layers[len(layers) // 2]
    session = nested_session(engine)
    session.run(4)
    # The layers before the middle one have already grown their cache when it fails.
    hook = middle.register_forward_pre_hook(_fail)
    try:
        # Step 4's forward pass ran during step 3's checks; the one that fails is step 5's,
        # run during step 4's: step 5 raises it.
        session.step()
        with pytest.raises(Injected):
            session.step()
    finally:
        hook.remove()
    assert len(session.steps) == 5
    session.run(3)
    assert [r.without_timings() for r in session.steps] == greedy[:8]
