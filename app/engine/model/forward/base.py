"""What the stepper needs from a forward engine, whichever model or server computes the logits.

A leaf of the engine: the models (local and remote) implement these, and nothing here imports
them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Protocol, runtime_checkable

import torch

from app.engine.model.sampling import SamplingParams
from app.engine.tokens import Tokens

__all__ = [
    "ExpectingForward",
    "ForwardEngine",
    "ModelIdentity",
    "RawDistribution",
    "ServingModel",
]


@dataclass(frozen=True)
class ModelIdentity:
    """What a trace depends on: the model, a content hash of its weights, library versions.

    A remote engine has no weight hash (the server does not expose its weights): it is named by
    its engine id, served name, tokenizer hash and vLLM version instead.
    """

    model_id: str
    weights_sha256: str | None
    xgrammar: str
    transformers: str
    torch: str
    served_name: str | None = None
    tokenizer_sha256: str | None = None
    vllm: str | None = None

    def to_dict(self) -> dict[str, str]:
        """The identity as JSON-ready values (fields that do not apply are left out)."""
        return {key: value for key, value in asdict(self).items() if value is not None}


@dataclass(frozen=True, slots=True)
class RawDistribution:
    """The next-token distribution for a prefix, before any mask and at temperature 1.

    A local model gives the logits of the whole vocabulary. A remote server gives
    log-probabilities: of the whole vocabulary when it allows it (``logits`` then holds them,
    which softmax maps to the same probabilities), else of its top-K only (``logits`` is None and
    ``top_logprobs`` holds them); the figures derived from a top-K are then bounds, and the step
    record names them in ``inexact``.

    Attributes:
        forward_ms: wall time of the forward pass (or requests) that produced it.
        logits: 1-D float logits (or log-probabilities, see ``logits_known``) over the
            vocabulary, on the engine's device; None when only the top-K is known.
        top_logprobs: (token id, log-probability) pairs, most probable first, when ``logits`` is
            None.
        extra_logprobs: log-probabilities of tokens outside ``top_logprobs`` learnt since (the
            token chosen or forced at this step).
        logits_known: False when the engine returns log-probabilities, not logits (a remote
            engine): records then leave ``top[].logit`` null and state their bounds.
    """

    forward_ms: float
    logits: torch.Tensor | None = None
    top_logprobs: tuple[tuple[int, float], ...] = ()
    extra_logprobs: tuple[tuple[int, float], ...] = ()
    logits_known: bool = True

    @property
    def exact(self) -> bool:
        """Whether the whole vocabulary's logits are known."""
        return self.logits is not None


class ForwardEngine(Protocol):
    """A session's prefix (the prompt, then each chosen token) and the model that continues it.

    Every method may be called again after any of them failed: :meth:`truncate` puts the prefix
    back in a known state, which is how a failed step leaves no trace.
    """

    def distribution(self) -> RawDistribution:
        """The raw next-token distribution after the current prefix."""
        ...

    def choose(
        self, raw: RawDistribution, bitmask: torch.Tensor, sampling: SamplingParams, *, index: int
    ) -> int:
        """Pick the next token among those ``bitmask`` allows (row 0, packed int32 words).

        Args:
            raw: what :meth:`distribution` returned for the current prefix.
            bitmask: the grammar's mask, on the CPU.
            sampling: greedy, or temperature/top-p with the seed.
            index: the step index, which selects the step's random draw.
        """
        ...

    def with_token(self, raw: RawDistribution, token_id: int) -> RawDistribution:
        """``raw`` with the raw log-probability of ``token_id`` known (the token chosen or
        forced at this step): ``raw`` itself when it already holds it."""
        ...

    def extend(self, token_id: int) -> None:
        """Grow the prefix by the chosen token."""
        ...

    def truncate(self, generated: int) -> None:
        """Keep the prompt and the first ``generated`` chosen tokens; forget the rest."""
        ...

    @property
    def memory_bytes(self) -> int:
        """Memory held for this prefix (the KV cache of a local model)."""
        ...


@runtime_checkable
class ExpectingForward(ForwardEngine, Protocol):
    """A forward engine that can run the passes of steps whose tokens are known in advance at
    once (a trace replayed): the local model's."""

    def expect(self, token_ids: Sequence[int]) -> None:
        """Run now the forward passes of the next steps, if they take ``token_ids``; a step
        that takes another token drops the rest (its passes then run as before)."""
        ...


class ServingModel(Protocol):
    """A model sessions run on: its tokenizer, its identity, and a forward engine per session."""

    @property
    def tokens(self) -> Tokens:
        """The tokenizer the mask is computed with."""
        ...

    @property
    def identity(self) -> ModelIdentity:
        """What a trace made on it depends on."""
        ...

    def open_forward(self, prompt_ids: Sequence[int]) -> ForwardEngine:
        """A forward engine for a new session's prompt."""
        ...

    def close(self) -> None:
        """Release what the model holds open (a remote engine's connections); idempotent."""
        ...
