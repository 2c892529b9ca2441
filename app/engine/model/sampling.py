"""Choosing the next token from masked logits: greedy, or temperature/top-p with a seeded draw."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import numpy as np
import torch

from app.exceptions import InvalidInput

__all__ = ["SamplingParams", "choose_token", "draw", "step_seed"]


@dataclass(frozen=True)
class SamplingParams:
    """How to pick a token. ``temperature == 0`` is greedy (the default).

    The random draw of step ``i`` depends only on ``(seed, i)``, so going back and stepping again
    repeats the same tokens under sampling as well.
    """

    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.temperature <= 10.0:
            raise InvalidInput(f"temperature must be between 0 and 10, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise InvalidInput(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0 <= self.seed < 2**63:
            raise InvalidInput(f"seed must be between 0 and 2**63 - 1, got {self.seed}")

    @classmethod
    def create(
        cls, temperature: float = 0.0, top_p: float = 1.0, seed: int | None = None
    ) -> SamplingParams:
        """Like the constructor, but a missing seed is replaced by a random one."""
        return cls(temperature, top_p, secrets.randbelow(2**31) if seed is None else seed)

    @property
    def greedy(self) -> bool:
        """Whether the highest-scoring allowed token is always taken."""
        return self.temperature == 0.0


def draw(seed: int, index: int) -> float:
    """A uniform number in [0, 1) determined by ``(seed, index)`` alone."""
    return float(np.random.default_rng([seed, index]).random())


def step_seed(seed: int, index: int) -> int:
    """A seed for step ``index`` alone, for an engine that draws itself (a remote server)."""
    return int(np.random.default_rng([seed, index]).integers(2**31))


def choose_token(masked_logits: torch.Tensor, params: SamplingParams, index: int) -> int:
    """Pick a token id from logits whose blocked entries are ``-inf``.

    Args:
        masked_logits: 1-D logits after the grammar mask was applied.
        params: greedy or temperature/top-p, with the seed.
        index: the step index, which selects the step's random draw.
    """
    if params.greedy:
        return int(torch.argmax(masked_logits))
    probs = torch.softmax(masked_logits.double() / params.temperature, dim=-1)
    sorted_probs, order = torch.sort(probs, descending=True, stable=True)
    cumulative = torch.cumsum(sorted_probs, dim=0)
    # Keep the smallest prefix whose mass reaches top_p (the first token always stays).
    # Scalars are made on the logits' device: searchsorted refuses a CPU value over CUDA values.
    top_p = torch.tensor(params.top_p, dtype=cumulative.dtype, device=cumulative.device)
    keep = int(torch.searchsorted(cumulative, top_p))
    keep = min(keep + 1, int((sorted_probs > 0).sum()))
    kept = cumulative[:keep]
    target = draw(params.seed, index) * float(kept[-1])
    found = torch.searchsorted(
        kept, torch.tensor(target, dtype=kept.dtype, device=kept.device), right=True
    )
    position = min(int(found), keep - 1)
    return int(order[position])
