"""What the grammar's mask did to the raw next-token distribution at one step."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from app.engine.forward.base import RawDistribution
from app.engine.mask import allowed_vector
from app.engine.records import TopToken
from app.engine.tokens import Tokens

__all__ = ["MaskedDistribution", "mask_distribution"]


@dataclass(frozen=True, slots=True)
class MaskedDistribution:
    """The raw distribution's figures under one mask.

    Attributes:
        probs: softmax of the raw logits (temperature 1), on the forward engine's device.
        top: the most probable tokens, each marked allowed or blocked.
        allowed_count: tokens the mask allows.
        blocked_mass: raw probability of the tokens the mask blocks.
    """

    probs: torch.Tensor
    top: tuple[TopToken, ...]
    allowed_count: int
    blocked_mass: float

    def prob(self, token_id: int) -> float:
        """The raw probability of ``token_id``."""
        return float(self.probs[token_id])

    def rank(self, token_id: int) -> int:
        """How many tokens are strictly more probable than ``token_id`` (0 = the most)."""
        return int((self.probs > self.probs[token_id]).sum())


def mask_distribution(
    raw: RawDistribution, bitmask: torch.Tensor, *, tokens: Tokens, top_k: int
) -> MaskedDistribution:
    """The figures of ``raw`` under ``bitmask`` (row 0, packed int32 words, on the CPU)."""
    if raw.logits is None:
        raise NotImplementedError("top-K-only distributions come with remote forward engines")
    logits = raw.logits
    allowed = allowed_vector(bitmask[0].to(logits.device, non_blocking=True), tokens.vocab_size)
    probs = torch.softmax(logits, dim=-1)
    top_probs, top_ids = torch.topk(probs, top_k)
    top = tuple(
        TopToken(token_id=i, text=tokens.text(i), prob=p, logit=logit, allowed=ok)
        for p, i, logit, ok in zip(
            top_probs.tolist(),
            top_ids.tolist(),
            logits[top_ids].tolist(),
            allowed[top_ids].tolist(),
            strict=True,
        )
    )
    return MaskedDistribution(
        probs=probs,
        top=top,
        allowed_count=int(allowed.sum()),
        blocked_mass=float(probs.masked_fill(allowed, 0.0).sum()),
    )
