"""What the stepper needs from a forward engine, whichever model or server computes the logits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from app.engine.sampling import SamplingParams

__all__ = ["ForwardEngine", "RawDistribution"]


@dataclass(frozen=True, slots=True)
class RawDistribution:
    """The next-token distribution for a prefix, before any mask and at temperature 1.

    A local model gives the logits of the whole vocabulary. An engine that can only return its
    top-K log-probabilities (a remote server) leaves ``logits`` None and fills ``top_logprobs``;
    the figures derived from it are then bounds, and the step record names them in ``inexact``.

    Attributes:
        forward_ms: wall time of the forward pass (or request) that produced it.
        logits: 1-D float logits over the vocabulary, on the engine's device; None when only
            the top-K is known.
        top_logprobs: (token id, log-probability) pairs, most probable first, when ``logits`` is
            None.
    """

    forward_ms: float
    logits: torch.Tensor | None = None
    top_logprobs: tuple[tuple[int, float], ...] = ()

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
