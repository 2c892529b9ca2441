"""A remote engine's model as sessions see it: the served tokenizer, the server, an identity."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from app.engine.model.forward.base import ModelIdentity
from app.engine.model.forward.remote import RemoteForward
from app.engine.model.loading import stop_ids_of
from app.engine.model.remote.check import ServerFacts, check_server
from app.engine.model.remote.client import VllmClient
from app.engine.tokens import Tokens
from app.exceptions import NotReady
from app.settings import RemoteEngineSpec

__all__ = ["RemoteModel", "connect", "load_tokenizer"]


@dataclass
class RemoteModel:
    """A vLLM server that passed the start-up check, and the tokenizer the mask is computed with.

    Attributes:
        spec: its entry in ``MASKSCOPE_REMOTE_ENGINES``.
        client: the server's client, shared by the sessions on it (vLLM batches them).
        facts: the vLLM version, the logits' width and the logprobs cap.
        tokens: the served model's tokenizer, with xgrammar's view of it.
        identity: the engine id, served name, tokenizer hash and vLLM version (no weight hash:
            the server does not expose its weights).
    """

    spec: RemoteEngineSpec
    client: VllmClient
    facts: ServerFacts
    tokens: Tokens
    identity: ModelIdentity

    def open_forward(self, prompt_ids: Sequence[int]) -> RemoteForward:
        """A forward engine for a new session's prompt (no state on the server)."""
        return RemoteForward(
            self.client,
            prompt_ids,
            vocab_size=self.tokens.vocab_size,
            logprobs_cap=self.logprobs_per_step,
        )

    @property
    def logprobs_per_step(self) -> int | None:
        """How many log-probabilities a step asks for; None: the whole vocabulary."""
        cap, wanted = self.facts.logprobs_cap, self.spec.top_logprobs
        if wanted is None:
            return cap
        return wanted if cap is None else min(wanted, cap)

    def close(self) -> None:
        """Close the client's connections."""
        self.client.close()


def load_tokenizer(spec: RemoteEngineSpec) -> tuple[Any, list[int]]:
    """The configured tokenizer and the served model's stop ids (from its generation config
    or model config when the tokenizer's directory or hub repository has them).

    Raises:
        NotReady: the tokenizer cannot be loaded.
    """
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    try:
        tokenizer = AutoTokenizer.from_pretrained(spec.tokenizer)
    except (OSError, ValueError) as error:
        raise NotReady(
            f"remote engine {spec.id!r}: cannot load the tokenizer {spec.tokenizer!r}: {error}"
        ) from error
    configs: list[Any] = []
    for kind in (AutoConfig, GenerationConfig):
        try:
            configs.append(kind.from_pretrained(spec.tokenizer))
        except (OSError, ValueError):  # a tokenizer-only directory: the tokenizer's EOS
            configs.append(None)
    return tokenizer, stop_ids_of(configs[0], configs[1], tokenizer)


def connect(spec: RemoteEngineSpec, *, timeout_s: float) -> RemoteModel:
    """Load the tokenizer, check it against the server and read the server's facts.

    Raises:
        NotReady: the tokenizer does not load, the server is unreachable, serves another model,
            tokenizes differently, or returns processed logprobs; the message says which.
    """
    tokenizer, stop_ids = load_tokenizer(spec)
    client = VllmClient(spec, timeout_s=timeout_s)
    try:
        facts = check_server(client, tokenizer)
        tokens = Tokens.from_tokenizer(tokenizer, facts.vocab_size, stop_ids)
    except BaseException:
        client.close()
        raise
    identity = ModelIdentity(
        model_id=spec.id,
        weights_sha256=None,
        xgrammar=importlib.metadata.version("xgrammar"),
        transformers=importlib.metadata.version("transformers"),
        torch=torch.__version__,
        served_name=spec.model,
        tokenizer_sha256=tokens.sha256,
        vllm=facts.version,
    )
    return RemoteModel(spec, client, facts, tokens, identity)
