"""The start-up check against real vLLM servers: the facts it reads and what it refuses."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from app.engine import Engine
from app.engine.model.remote import VllmClient, check_server
from app.engine.model.remote.check import read_logprobs_cap
from app.engine.model.remote.launch import DEFAULT_SERVED_NAME
from app.exceptions import EngineError, NotReady
from tests.engine.model.remote.conftest import spec_for
from tests.vllm_server import VllmServer

pytestmark = pytest.mark.remote

VLLM_VERSION = "0.32.0"


def test_the_facts_of_an_uncapped_server(client: VllmClient, engine: Engine) -> None:
    facts = check_server(client, engine.model.tokens.tokenizer)
    assert facts.version == VLLM_VERSION
    assert facts.vocab_size == engine.model.tokens.vocab_size == 49152
    assert facts.logprobs_cap is None and facts.full_vocabulary


def test_the_cap_of_a_capped_server(vllm_capped_server: VllmServer, engine: Engine) -> None:
    capped = VllmClient(spec_for(vllm_capped_server), timeout_s=120)
    try:
        facts = check_server(capped, engine.model.tokens.tokenizer)
        assert (facts.vocab_size, facts.logprobs_cap) == (49152, 20)
        assert not facts.full_vocabulary
        assert len(capped.next_logprobs([1, 2, 3], count=20).token_ids) == 20
        with pytest.raises(EngineError, match=r"greater than max allowed: 20"):
            capped.next_logprobs([1, 2, 3], count=21)
    finally:
        capped.close()


def test_read_logprobs_cap_reads_the_vocabulary_of_an_uncapped_server(client: VllmClient) -> None:
    assert read_logprobs_cap(client, [1, 2, 3]) == (49152, None)


def test_a_served_name_that_is_not_served(vllm_server: VllmServer, engine: Engine) -> None:
    wrong = VllmClient(spec_for(vllm_server, model="llama-70b"), timeout_s=60)
    with pytest.raises(NotReady) as caught:
        check_server(wrong, engine.model.tokens.tokenizer)
    assert caught.value.message == (
        f"remote engine 'vllm': the server serves '{DEFAULT_SERVED_NAME}', not 'llama-70b'"
    )
    wrong.close()


def test_a_tokenizer_that_is_not_the_servers(client: VllmClient) -> None:
    # The served tokenizer with one added token, as a fine-tune's tokenizer often has.
    tokenizer = AutoTokenizer.from_pretrained(client.spec.tokenizer)
    tokenizer.add_tokens(["Lovelace"])
    with pytest.raises(NotReady) as caught:
        check_server(client, tokenizer)
    message = caught.value.message
    assert message.startswith(
        f"remote engine 'vllm': the tokenizer {client.spec.tokenizer!r} does not match the "
        'server\'s: \'{"user": {"id": 42, "name": "Ada Lovelace"'
    )
    assert "first different at token" in message and "49152" in message


def test_an_unreachable_server_is_not_ready(engine: Engine) -> None:
    from tests.conftest import free_port

    gone = VllmClient(spec_for(f"http://127.0.0.1:{free_port()}/v1"), timeout_s=5)
    with pytest.raises(NotReady, match=r"^remote engine 'vllm' is not ready: .* is unreachable"):
        check_server(gone, engine.model.tokens.tokenizer)
    gone.close()
