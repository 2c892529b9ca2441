"""What the grammar's mask did to the raw next-token distribution at one step."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from app.engine.forward.base import RawDistribution
from app.engine.mask import allowed_vector
from app.engine.records import TopToken
from app.engine.tokens import Tokens

__all__ = ["ALLOWED_LIST_MAX", "MaskedDistribution", "mask_distribution"]

#: At most this many allowed tokens, every one is recorded with its probability.
ALLOWED_LIST_MAX = 100


@dataclass(frozen=True, slots=True)
class MaskedDistribution:
    """The raw distribution's figures under one mask.

    Attributes:
        probs: softmax of the raw logits (temperature 1), on the forward engine's device.
        top: the most probable tokens, each marked allowed or blocked.
        allowed_count: tokens the mask allows.
        blocked_mass: raw probability of the tokens the mask blocks.
        allowed_tokens: when at most ``ALLOWED_LIST_MAX`` tokens are allowed, every one of them,
            most probable first (raw probabilities); else empty.
    """

    probs: torch.Tensor
    top: tuple[TopToken, ...]
    allowed_count: int
    blocked_mass: float
    allowed_tokens: tuple[TopToken, ...] = ()

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
    allowed_count = int(allowed.sum())
    return MaskedDistribution(
        probs=probs,
        top=top,
        allowed_count=allowed_count,
        blocked_mass=float(probs.masked_fill(allowed, 0.0).sum()),
        allowed_tokens=_allowed_tokens(logits, probs, allowed, tokens)
        if allowed_count <= ALLOWED_LIST_MAX
        else (),
    )


def _allowed_tokens(
    logits: torch.Tensor, probs: torch.Tensor, allowed: torch.Tensor, tokens: Tokens
) -> tuple[TopToken, ...]:
    ids = allowed.nonzero().flatten()
    order = torch.argsort(probs[ids], descending=True, stable=True)
    ids = ids[order]
    return tuple(
        TopToken(token_id=i, text=tokens.text(i), prob=p, logit=logit, allowed=True)
        for i, p, logit in zip(ids.tolist(), probs[ids].tolist(), logits[ids].tolist(), strict=True)
    )
