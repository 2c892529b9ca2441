"""The vLLM client against a real ``vllm serve`` of the local model's own weights."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from app.engine.model.remote import ALL_TOKENS, VllmClient
from app.exceptions import EngineError, EngineTimeout, EngineUnreachable
from tests.engine.model.remote.conftest import spec_for
from tests.tcp_proxy import TcpProxy
from tests.vllm_server import VllmServer

pytestmark = pytest.mark.remote

# The contract's tolerance between a remote figure and the local model's (same float32 weights).
PROB_TOLERANCE = 1e-4


def _probs(values: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.exp(values))


def test_the_top_k_is_the_local_models(
    client: VllmClient, local_logprobs: torch.Tensor, prompt_ids: list[int]
) -> None:
    local = local_logprobs
    top = client.next_logprobs(prompt_ids, count=20)
    assert not top.complete and len(top.token_ids) == 20
    assert top.token_ids.tolist() == torch.topk(local, 20).indices.tolist()
    ids = torch.from_numpy(top.token_ids)
    assert torch.allclose(_probs(top.logprobs), local[ids].exp(), atol=PROB_TOLERANCE, rtol=0)
    assert bool((np.diff(top.logprobs) <= 0).all()), "most probable first"


def test_the_whole_vocabulary_is_the_local_distribution(
    client: VllmClient, local_logprobs: torch.Tensor, prompt_ids: list[int]
) -> None:
    local = local_logprobs
    full = client.next_logprobs(prompt_ids, count=ALL_TOKENS)
    assert full.complete
    assert sorted(full.token_ids.tolist()) == list(range(len(local)))
    remote = torch.zeros_like(local)
    remote[torch.from_numpy(full.token_ids)] = _probs(full.logprobs)
    assert float((remote - local.exp()).abs().max()) < PROB_TOLERANCE
    assert math.isclose(float(remote.sum()), 1.0, abs_tol=1e-4)


def test_a_choice_among_allowed_tokens_keeps_the_raw_logprob(
    client: VllmClient, local_logprobs: torch.Tensor, prompt_ids: list[int]
) -> None:
    local = local_logprobs
    ranked = torch.argsort(local, descending=True).tolist()
    allowed = ranked[3:9]  # the three most probable tokens are blocked
    greedy = client.choose(prompt_ids, allowed_ids=allowed, temperature=0.0, top_p=1.0, seed=0)
    assert greedy.token_id == ranked[3]
    assert abs(math.exp(greedy.logprob) - float(local[ranked[3]].exp())) < PROB_TOLERANCE


def test_a_seeded_choice_repeats_and_stays_allowed(
    client: VllmClient, prompt_ids: list[int]
) -> None:
    allowed = client.next_logprobs(prompt_ids, count=20).token_ids[1:].tolist()
    draws = {}
    for seed in range(6):
        first = client.choose(
            prompt_ids, allowed_ids=allowed, temperature=1.5, top_p=1.0, seed=seed
        )
        again = client.choose(
            prompt_ids, allowed_ids=allowed, temperature=1.5, top_p=1.0, seed=seed
        )
        assert first.token_id == again.token_id, seed
        assert first.token_id in allowed
        draws[seed] = first.token_id
    assert len(set(draws.values())) > 1, "the seed changes the draw"


def test_a_prompt_beyond_the_context_is_the_servers_error(
    client: VllmClient, prompt_ids: list[int]
) -> None:
    with pytest.raises(EngineError) as caught:
        client.next_logprobs(prompt_ids * 100, count=5)
    assert type(caught.value) is EngineError
    message = caught.value.message
    assert message.startswith("remote engine 'vllm' (POST http://127.0.0.1:")
    assert "answered 400: " in message and "maximum context length is 2048 tokens" in message


def test_a_stopped_server_is_unreachable_and_a_restarted_one_answers(
    vllm_server: VllmServer, prompt_ids: list[int]
) -> None:
    proxy = TcpProxy(vllm_server.port)
    client = VllmClient(spec_for(f"{proxy.root_url}/v1"), timeout_s=120)
    try:
        before = client.next_logprobs(prompt_ids, count=5)
        proxy.stop()
        with pytest.raises(EngineUnreachable) as caught:
            client.next_logprobs(prompt_ids, count=5)
        assert caught.value.message.startswith(
            f"remote engine 'vllm' (POST {proxy.root_url}/v1/completions) is unreachable: "
        )
        proxy.start()
        after = client.next_logprobs(prompt_ids, count=5)
        assert after.token_ids.tolist() == before.token_ids.tolist()
    finally:
        proxy.stop()
        client.close()


def test_a_hung_server_times_out(vllm_server: VllmServer, prompt_ids: list[int]) -> None:
    proxy = TcpProxy(vllm_server.port)
    proxy.stall()
    client = VllmClient(spec_for(f"{proxy.root_url}/v1"), timeout_s=1.5)
    try:
        with pytest.raises(EngineTimeout) as caught:
            client.next_logprobs(prompt_ids, count=5)
        assert caught.value.message.endswith("/v1/completions): no answer within 1.5 s")
    finally:
        proxy.stop()
        client.close()


def test_nothing_listening_is_unreachable() -> None:
    from tests.conftest import free_port

    client = VllmClient(spec_for(f"http://127.0.0.1:{free_port()}/v1"), timeout_s=5)
    with pytest.raises(EngineUnreachable, match=r"is unreachable: .*[Cc]onnection refused"):
        client.version()
    client.close()
