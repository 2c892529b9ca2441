"""Clients of the session's real vLLM servers, and a prompt to compare with the local model."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from app.engine import ChatMessage, Engine, with_schema
from app.engine.model.loading import checkpoint_source
from app.engine.model.prompt import render_prompt
from app.engine.model.remote import VllmClient
from app.engine.model.remote.launch import DEFAULT_SERVED_NAME
from app.examples import load_examples
from app.settings import RemoteEngineSpec, Settings
from tests.vllm_server import VllmServer

NESTED = next(e for e in load_examples() if e.id == "nested")


def spec_for(server: VllmServer | str, **overrides: str) -> RemoteEngineSpec:
    """The ``MASKSCOPE_REMOTE_ENGINES`` entry of ``server`` (or of a URL ending in /v1): the
    local model's checkpoint, whose tokenizer is the served model's."""
    fields = {
        "id": "vllm",
        "url": server if isinstance(server, str) else server.url,
        "model": DEFAULT_SERVED_NAME,
        "tokenizer": checkpoint_source(Settings()),
    }
    fields.update(overrides)
    return RemoteEngineSpec.model_validate(fields)


@pytest.fixture(scope="module")
def client(vllm_server: VllmServer) -> Iterator[VllmClient]:
    """A client of the full-vocabulary server."""
    made = VllmClient(spec_for(vllm_server), timeout_s=120)
    yield made
    made.close()


@pytest.fixture(scope="module")
def prompt_ids(engine: Engine) -> list[int]:
    """The nested example's prompt as the local model's chat template renders it."""
    source = NESTED.source()
    messages = [
        ChatMessage("system", with_schema(NESTED.system, source)),
        ChatMessage("user", NESTED.prompt),
    ]
    return list(render_prompt(engine.model.tokens, messages).token_ids)


@pytest.fixture(scope="module")
def local_logprobs(engine: Engine, prompt_ids: list[int]) -> torch.Tensor:
    """The local model's raw next-token log-probabilities (float64) after ``prompt_ids``."""
    with engine.model.lock, torch.inference_mode():
        ids = torch.tensor([prompt_ids], device=engine.model.device)
        out = engine.model.model(input_ids=ids, logits_to_keep=1)
    return torch.log_softmax(out.logits[0, -1].double().cpu(), dim=-1)
