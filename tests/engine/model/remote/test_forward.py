"""Sessions on a real vLLM server (the local model's own weights) against the local model."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch

from app.engine import (
    ChatMessage,
    Engine,
    GrammarKind,
    GrammarSpec,
    SamplingParams,
    Session,
    StepRecord,
    with_schema,
)
from app.engine.mask import allowed_array, words_from_bytes
from app.engine.model.remote.model import RemoteModel, connect
from app.examples import Example, load_examples
from app.exceptions import EngineUnreachable, TokenRefused
from tests.engine.model.remote.conftest import NESTED, spec_for
from tests.tcp_proxy import TcpProxy
from tests.vllm_server import VllmServer

pytestmark = pytest.mark.remote

PROB_TOLERANCE = 1e-4
EXAMPLES = load_examples()
# The first steps of each example (the whole outputs would take minutes on 2 cores): they cover
# keys, strings, numbers, enums and nesting.
EXAMPLE_STEPS = 30


@contextmanager
def _remote(
    server: VllmServer | str, local: Engine, **overrides: int
) -> Iterator[Engine[RemoteModel]]:
    model = connect(spec_for(server).model_copy(update=overrides), timeout_s=120)
    assert model.tokens.sha256 == local.model.tokens.sha256, "the same tokenizer: one compiler"
    try:
        yield Engine(model, local.compiler, local.settings)
    finally:
        model.close()


@pytest.fixture(scope="module")
def remote(vllm_server: VllmServer, engine: Engine) -> Iterator[Engine[RemoteModel]]:
    """The full-vocabulary server as an engine."""
    with _remote(vllm_server, engine) as made:
        yield made


@pytest.fixture(scope="module")
def capped(vllm_capped_server: VllmServer, engine: Engine) -> Iterator[Engine[RemoteModel]]:
    """The server capped at 20 logprobs a request (top-K only) as an engine."""
    with _remote(vllm_capped_server, engine) as made:
        yield made


def _session(
    engine: Engine | Engine[RemoteModel],
    example: Example = NESTED,
    *,
    sampling: SamplingParams | None = None,
    max_tokens: int | None = None,
) -> Session:
    source = example.source()
    messages = [
        ChatMessage("system", with_schema(example.system, source)),
        ChatMessage("user", example.prompt),
    ]
    return engine.new_session(
        engine.compile(GrammarSpec(GrammarKind.JSON_SCHEMA, source)),
        messages=messages,
        sampling=sampling,
        max_tokens=max_tokens or example.max_tokens,
    )


def _compare(local: list[StepRecord], remote: list[StepRecord]) -> None:
    """Same tokens, same masks, and the top probabilities within the tolerance."""
    assert [r.token_id for r in remote] == [r.token_id for r in local]
    for here, there in zip(local, remote, strict=True):
        assert there.bitmask == here.bitmask and there.allowed_count == here.allowed_count
        assert there.inexact is not None and here.inexact is None
        assert abs(there.prob - here.prob) < PROB_TOLERANCE
        local_top = {t.token_id: t.prob for t in here.top}
        for candidate in there.top:
            assert candidate.logit is None
            if candidate.token_id in local_top:
                assert abs(candidate.prob - local_top[candidate.token_id]) < PROB_TOLERANCE


def test_a_greedy_session_on_the_whole_vocabulary_is_the_local_one(
    remote: Engine[RemoteModel], engine: Engine
) -> None:
    local = _session(engine, max_tokens=12)
    there = _session(remote, max_tokens=12)
    _compare(local.run(12), there.run(12))
    for record in there.steps:
        assert record.inexact == () and record.blocked_mass_max == record.blocked_mass
    for here, record in zip(local.steps, there.steps, strict=True):
        assert abs(record.blocked_mass - here.blocked_mass) < PROB_TOLERANCE
        assert record.rank == here.rank


def test_an_engine_set_to_a_top_k_asks_for_it_and_states_its_bounds(
    vllm_server: VllmServer, engine: Engine
) -> None:
    """``top_logprobs`` on a server that allows the whole vocabulary: a top-K all the same."""
    local = _session(engine, max_tokens=12)
    local.run(12)
    with _remote(vllm_server, engine, top_logprobs=5) as top5:
        assert top5.model.logprobs_per_step == 5
        there = _session(top5, max_tokens=12)
        there.run(12)
    _compare(local.steps, there.steps)
    assert all(len(r.top) <= 5 for r in there.steps)
    assert any("blocked_mass" in (r.inexact or ()) for r in there.steps)
    for here, record in zip(local.steps, there.steps, strict=True):
        assert record.blocked_mass_max is not None
        low, high = record.blocked_mass, record.blocked_mass_max
        assert low - PROB_TOLERANCE <= here.blocked_mass <= high + PROB_TOLERANCE


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.id for e in EXAMPLES])
def test_a_greedy_top_k_session_gives_the_local_tokens_on_every_example(
    example: Example, capped: Engine[RemoteModel], engine: Engine
) -> None:
    local = _session(engine, example, max_tokens=EXAMPLE_STEPS)
    local.run(EXAMPLE_STEPS)
    there = _session(capped, example, max_tokens=EXAMPLE_STEPS)
    there.run(EXAMPLE_STEPS)
    _compare(local.steps, there.steps)
    assert there.stop_reason == local.stop_reason and there.text == local.text
    for here, record in zip(local.steps, there.steps, strict=True):
        assert record.blocked_mass_max is not None
        # The bounds hold the local figure (itself a float32 sum, off by up to ~1e-5).
        low, high = record.blocked_mass, record.blocked_mass_max
        assert low - PROB_TOLERANCE <= here.blocked_mass <= high + PROB_TOLERANCE
        if "blocked_mass" not in (record.inexact or ()):
            assert abs(record.blocked_mass - here.blocked_mass) < PROB_TOLERANCE
        if "rank" not in (record.inexact or ()):
            assert record.rank == here.rank


def test_a_forced_token_outside_the_top_k_has_its_exact_probability_and_a_bounded_rank(
    capped: Engine[RemoteModel], engine: Engine
) -> None:
    local = _session(engine, max_tokens=30)
    local.run(30)
    there = _session(capped, max_tokens=30)
    there.run(30)
    # The widest mask of the run, and its allowed token of highest id: far down the distribution.
    index = max(range(len(local.steps)), key=lambda i: local.steps[i].allowed_count)
    words = torch.from_numpy(words_from_bytes(local.steps[index].bitmask).copy())
    token = int(allowed_array(words, engine.model.tokens.vocab_size).nonzero()[0][-1])
    here = local.force_at(index, token)
    record = there.force_at(index, token)
    assert here.rank >= 20, "the token must be outside the server's top-20"
    assert record.token_id == token and record.forced
    assert abs(record.prob - here.prob) < PROB_TOLERANCE
    assert record.inexact is not None and "rank" in record.inexact
    assert record.rank <= here.rank


def test_forcing_a_blocked_token_is_refused_and_changes_nothing(
    remote: Engine[RemoteModel],
) -> None:
    session = _session(remote)
    session.run(2)
    blocked = next(t.token_id for t in session.steps[0].top if not t.allowed)
    with pytest.raises(TokenRefused, match="the grammar blocks token"):
        session.force_at(0, blocked)
    assert len(session.steps) == 2


def test_a_seeded_sampled_session_repeats_after_back_and_step(remote: Engine[RemoteModel]) -> None:
    _seeded_repeats(remote)


def test_a_seeded_sampled_top_k_session_repeats_after_back_and_step(
    capped: Engine[RemoteModel],
) -> None:
    """The top-K path: the server draws among the allowed tokens with the step's own seed."""
    _seeded_repeats(capped)


def _seeded_repeats(remote: Engine[RemoteModel]) -> None:
    """Back and step again repeat the draws; so does another session with the same seed."""
    sampling = SamplingParams(temperature=1.2, top_p=0.95, seed=7)
    session = _session(remote, sampling=sampling, max_tokens=30)
    first = [r.token_id for r in session.run(8)]
    session.back(4)
    again = [r.token_id for r in session.run(4)]
    assert again == first[4:]
    other = _session(remote, sampling=sampling, max_tokens=30)
    assert [r.token_id for r in other.run(8)] == first


def test_a_server_stopped_mid_run_fails_the_step_and_the_session_continues(
    vllm_server: VllmServer, remote: Engine[RemoteModel], engine: Engine
) -> None:
    proxy = TcpProxy(vllm_server.port)
    with _remote(f"{proxy.root_url}/v1", engine) as through:
        session = _session(through, max_tokens=40)
        session.run(3)
        proxy.stop()
        # The next step's forward pass ran during the step before it, while the server was up.
        session.step()
        before = [r.without_timings() for r in session.steps]
        with pytest.raises(EngineUnreachable, match="is unreachable"):
            session.step()
        assert [r.without_timings() for r in session.steps] == before and not session.done
        proxy.start()
        session.run(3)
        uninterrupted = _session(remote, max_tokens=40)
        uninterrupted.run(7)
        assert [r.token_id for r in session.steps] == [r.token_id for r in uninterrupted.steps]
    proxy.stop()
