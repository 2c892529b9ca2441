"""The start-up check of a remote engine: is this the server, model and tokenizer we think?

The mask is computed here with the configured tokenizer while the server runs its own: if they
differ, every figure shown would be wrong without anything failing. A few ``/tokenize`` and
``/detokenize`` round trips catch a wrong tokenizer; one request reads the server's logprobs cap
(and the model's vocabulary size, the width of its logits); two more check that the logprobs are
raw (``--logprobs-mode raw_logprobs``, vLLM's default), not taken after temperature.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.engine.model.remote.client import ALL_TOKENS, VllmClient
from app.exceptions import EngineError, NotReady, RemoteEngineError

__all__ = ["PROBE_TEXTS", "ServerFacts", "check_server", "read_logprobs_cap"]

#: Texts whose tokenization must agree: JSON, accents, CJK, emoji, runs of whitespace, and the
#: chat markup a template writes (special tokens written as text).
PROBE_TEXTS = (
    '{"user": {"id": 42, "name": "Ada Lovelace", "tags": ["a", "b"], "ok": true}}',
    "Grüße aus Köln, 東京 and São Paulo: naïve café 🙂👍🏽 — ¿qué?",
    "  two  spaces,\ta tab,\r\nand\n\n\nnewlines   ",
    "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<s></s>[INST]",
)
# vLLM's refusal of a logprobs count above --max-logprobs (vllm/sampling_params.py).
_CAP_MESSAGE = re.compile(r"logprobs of (\d+), which is greater than max allowed: (\d+)")
# Raw logprobs do not depend on the request's temperature; processed ones do.
_RAW_TOLERANCE = 1e-3


@dataclass(frozen=True)
class ServerFacts:
    """What the check learnt about the server.

    Attributes:
        version: the vLLM version (``GET /version``).
        vocab_size: the model's vocabulary size: the width of its logits and of the bitmask.
        logprobs_cap: the most logprobs one request may ask for; None when the whole
            vocabulary is allowed (``--max-logprobs -1``).
    """

    version: str
    vocab_size: int
    logprobs_cap: int | None

    @property
    def full_vocabulary(self) -> bool:
        """Whether one request can return the whole distribution."""
        return self.logprobs_cap is None

    def to_dict(self) -> dict[str, Any]:
        """The facts as JSON-ready values."""
        return {
            "version": self.version,
            "vocab_size": self.vocab_size,
            "logprobs_cap": self.logprobs_cap,
        }


def check_server(
    client: VllmClient, tokenizer: Any, *, probes: Sequence[str] = PROBE_TEXTS
) -> ServerFacts:
    """Check the server against the configured model name and tokenizer, and read its facts.

    Args:
        client: the engine's client.
        tokenizer: the Hugging Face tokenizer the mask is computed with.
        probes: texts whose round trips must agree.

    Raises:
        NotReady: the check failed; the message says why (unreachable, wrong model name, a
            tokenizer that differs, logprobs that are not raw...).
    """
    name = client.spec.id
    try:
        version = client.version()
        served = client.served_models()
        if client.spec.model not in served:
            raise NotReady(
                f"remote engine {name!r}: the server serves {', '.join(map(repr, served))}, "
                f"not {client.spec.model!r}"
            )
        probe_ids = _check_tokenizer(client, tokenizer, probes)
        vocab_size, cap = read_logprobs_cap(client, probe_ids)
        _check_raw_logprobs(client, probe_ids)
    except RemoteEngineError as error:
        raise NotReady(f"remote engine {name!r} is not ready: {error.message}") from error
    if vocab_size < len(tokenizer):
        raise NotReady(
            f"remote engine {name!r}: the served model has {vocab_size} logits but the tokenizer "
            f"{client.spec.tokenizer!r} has {len(tokenizer)} tokens: not the served model's "
            "tokenizer"
        )
    return ServerFacts(version=version, vocab_size=vocab_size, logprobs_cap=cap)


def _check_tokenizer(client: VllmClient, tokenizer: Any, probes: Sequence[str]) -> list[int]:
    """Round-trip ``probes`` both ways; returns the first probe's ids (a prompt for later)."""
    first: list[int] = []
    for text in probes:
        local = list(tokenizer.encode(text, add_special_tokens=False))
        remote = client.tokenize(text)
        if local != remote:
            at = next(
                (i for i, (a, b) in enumerate(zip(local, remote, strict=False)) if a != b), None
            )
            at = min(len(local), len(remote)) if at is None else at
            raise NotReady(
                f"remote engine {client.spec.id!r}: the tokenizer {client.spec.tokenizer!r} "
                f"does not match the server's: {text!r} is {len(local)} tokens here and "
                f"{len(remote)} there, first different at token {at} "
                f"({local[at : at + 3]} here, {remote[at : at + 3]} there)"
            )
        here, there = tokenizer.decode(local), client.detokenize(local)
        if here != there:
            raise NotReady(
                f"remote engine {client.spec.id!r}: the tokenizer {client.spec.tokenizer!r} "
                f"decodes {local[:8]}... as {here[:60]!r} and the server as {there[:60]!r}"
            )
        first = first or local
    if not first:
        raise NotReady(f"remote engine {client.spec.id!r}: the probe texts give no tokens")
    return first


def read_logprobs_cap(client: VllmClient, prompt_ids: Sequence[int]) -> tuple[int, int | None]:
    """Ask for the whole vocabulary once: (vocabulary size, cap or None when uncapped).

    vLLM answers with every logprob when ``--max-logprobs -1`` (their count is the vocabulary
    size); otherwise it refuses with a 400 that names both the vocabulary size and the cap.

    Raises:
        EngineError: the server's answer is neither.
    """
    try:
        full = client.next_logprobs(prompt_ids, count=ALL_TOKENS)
    except EngineError as error:
        found = _CAP_MESSAGE.search(error.message)
        if found is None:
            raise
        return int(found.group(1)), int(found.group(2))
    total = math.fsum(math.exp(v) for v in full.logprobs)
    if abs(total - 1.0) > _RAW_TOLERANCE:
        raise EngineError(
            f"the server's logprobs sum to {total:.4f}, not 1: are they logits "
            "(--logprobs-mode raw_logits)? Maskscope needs raw_logprobs, vLLM's default"
        )
    return len(full.token_ids), None


def _check_raw_logprobs(client: VllmClient, prompt_ids: Sequence[int]) -> None:
    greedy = client.next_logprobs(prompt_ids, count=1)
    hot = client.choose(
        prompt_ids,
        allowed_ids=[int(greedy.token_ids[0])],
        temperature=0.5,
        top_p=1.0,
        seed=0,
    )
    if abs(hot.logprob - float(greedy.logprobs[0])) > _RAW_TOLERANCE:
        raise NotReady(
            f"remote engine {client.spec.id!r}: its logprobs change with the temperature "
            f"({float(greedy.logprobs[0]):.4f} at 0, {hot.logprob:.4f} at 0.5): the server "
            "runs with --logprobs-mode processed_*; Maskscope needs raw_logprobs, vLLM's "
            "default"
        )
