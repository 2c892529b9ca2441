"""What the grammar's mask did to the raw next-token distribution at one step."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import torch

from app.engine.model.forward.base import RawDistribution
from app.engine.records import TopToken
from app.engine.tokens import Tokens

__all__ = ["ALLOWED_LIST_MAX", "MaskedDistribution", "mask_distribution"]

#: At most this many allowed tokens, every one is recorded with its probability.
ALLOWED_LIST_MAX = 100


@dataclass(frozen=True, slots=True)
class MaskedDistribution:
    """The raw distribution's figures under one mask.

    From the whole vocabulary every figure is exact. From a top-K (a remote engine whose
    logprobs are capped) the probabilities of the returned and learnt tokens are exact, and
    ``blocked_mass`` and the rank of a token outside the top-K are lower bounds.

    Attributes:
        top: the most probable tokens, each marked allowed or blocked.
        allowed_count: tokens the mask allows.
        blocked_mass: raw probability of the tokens the mask blocks (a lower bound when
            ``inexact`` names it).
        blocked_mass_max: its upper bound (equal to it when exact).
        inexact: the figures that are bounds (``blocked_mass``), besides ranks (see
            :meth:`rank_exact`).
        probs: softmax of the raw logits (temperature 1) when the whole vocabulary is known.
        known: raw probabilities of the tokens known, when only a top-K is.
        top_k_ids: the tokens of that top-K (``known`` may also hold the token chosen or forced).
        reports_bounds: whether the record states its bounds (``inexact``): a remote engine's.
        allowed_tokens: when at most ``ALLOWED_LIST_MAX`` tokens are allowed and the
            probability of each is known, every one of them, most probable first (raw
            probabilities); else empty.
    """

    top: tuple[TopToken, ...]
    allowed_count: int
    blocked_mass: float
    blocked_mass_max: float
    inexact: tuple[str, ...] = ()
    probs: torch.Tensor | None = None
    known: Mapping[int, float] = field(default_factory=dict)
    top_k_ids: frozenset[int] = frozenset()
    reports_bounds: bool = False
    allowed_tokens: tuple[TopToken, ...] = ()

    def prob(self, token_id: int) -> float:
        """The raw probability of ``token_id`` (known for the tokens of ``top_logprobs`` and
        ``extra_logprobs``)."""
        if self.probs is not None:
            return float(self.probs[token_id])
        return self.known[token_id]

    def rank(self, token_id: int) -> int:
        """How many tokens are strictly more probable than ``token_id`` (0 = the most); from a
        top-K, for a token outside it, how many of the top-K are (a lower bound)."""
        if self.probs is not None:
            return int((self.probs > self.probs[token_id]).sum())
        p = self.prob(token_id)
        return sum(1 for i in self.top_k_ids if self.known[i] > p)

    def rank_exact(self, token_id: int) -> bool:
        """Whether :meth:`rank` is exact for ``token_id``: every token more probable than a
        top-K token is in the top-K."""
        return self.probs is not None or token_id in self.top_k_ids


def mask_distribution(
    raw: RawDistribution, allowed: np.ndarray, *, tokens: Tokens, top_k: int
) -> MaskedDistribution:
    """The figures of ``raw`` under the mask ``allowed`` (:func:`~app.engine.mask.allowed_array`
    of its words: the step unpacks them once, for these figures and its checks)."""
    if raw.logits is None:
        return _mask_top_k(raw, allowed, tokens=tokens, top_k=top_k)
    logits = raw.logits
    # Few torch calls: each gives the GIL up and waits for it again, behind the forward pass of
    # a batch while other sessions' steps are checked.
    allowed_t = torch.from_numpy(allowed).to(logits.device, non_blocking=True)
    probs = torch.softmax(logits, dim=-1)
    top_probs, top_ids = torch.topk(probs, top_k)
    ids = top_ids.tolist()
    shown_logits: list[float | None] = (
        logits[top_ids].tolist() if raw.logits_known else [None] * top_k
    )
    top = tuple(
        TopToken(token_id=i, text=tokens.text(i), prob=p, logit=logit, allowed=bool(allowed[i]))
        for p, i, logit in zip(top_probs.tolist(), ids, shown_logits, strict=True)
    )
    blocked = _blocked_mass(probs, allowed, allowed_t)
    allowed_count = int(np.count_nonzero(allowed))
    return MaskedDistribution(
        top=top,
        allowed_count=allowed_count,
        blocked_mass=blocked,
        blocked_mass_max=blocked,
        probs=probs,
        reports_bounds=not raw.logits_known,
        allowed_tokens=_allowed_tokens(logits, probs, allowed_t, tokens, raw.logits_known)
        if allowed_count <= ALLOWED_LIST_MAX
        else (),
    )


def _blocked_mass(probs: torch.Tensor, allowed: np.ndarray, allowed_t: torch.Tensor) -> float:
    """The probability the mask removes, the same in every thread.

    torch splits a CPU sum this long across the calling thread's intra-op threads, whose number
    each thread fixes when it first runs an op (a step runs in whichever thread leads its batch):
    the same probabilities summed in two threads could differ in the last bits, and a record
    repeated after a back would differ. numpy's pairwise sum runs in one thread.
    """
    if probs.device.type == "cpu":
        return float(probs.float().numpy()[~allowed].sum(dtype=np.float64))
    return float(probs.masked_fill(allowed_t, 0.0).sum())


def _allowed_tokens(
    logits: torch.Tensor,
    probs: torch.Tensor,
    allowed: torch.Tensor,
    tokens: Tokens,
    logits_known: bool,
) -> tuple[TopToken, ...]:
    ids = allowed.nonzero().flatten()
    order = torch.argsort(probs[ids], descending=True, stable=True)
    ids = ids[order]
    shown: list[float | None] = logits[ids].tolist() if logits_known else [None] * len(ids)
    return tuple(
        TopToken(token_id=i, text=tokens.text(i), prob=p, logit=logit, allowed=True)
        for i, p, logit in zip(ids.tolist(), probs[ids].tolist(), shown, strict=True)
    )


def _mask_top_k(
    raw: RawDistribution, allowed: np.ndarray, *, tokens: Tokens, top_k: int
) -> MaskedDistribution:
    """From a top-K: exact figures for the known tokens, bounds for the mass of the others.

    Every token outside the top-K is at most as probable as the top-K's last one, which
    bounds the blocked mass on both sides: the unknown mass lies among the unknown tokens, the
    blocked ones holding between ``rest - allowed_unknown * floor`` and
    ``min(rest, blocked_unknown * floor)`` of it.
    """
    known = {i: math.exp(lp) for i, lp in (*raw.top_logprobs, *raw.extra_logprobs)}
    top_k_ids = frozenset(i for i, _ in raw.top_logprobs)
    top = tuple(
        TopToken(
            token_id=i, text=tokens.text(i), prob=known[i], logit=None, allowed=bool(allowed[i])
        )
        for i, _ in raw.top_logprobs[:top_k]
    )
    allowed_count = int(allowed.sum())
    allowed_known = [i for i in known if allowed[i]]
    blocked_known = math.fsum(p for i, p in known.items() if not allowed[i])
    rest = max(0.0, 1.0 - math.fsum(known.values()))
    floor = min((known[i] for i in top_k_ids), default=1.0)
    allowed_unknown = allowed_count - len(allowed_known)
    blocked_unknown = tokens.vocab_size - len(known) - allowed_unknown
    low = blocked_known + max(0.0, rest - allowed_unknown * floor)
    high = blocked_known + min(rest, blocked_unknown * floor)
    # Listed only when complete: a partial list would read as "these are all the choices".
    listed = (
        tuple(
            TopToken(token_id=i, text=tokens.text(i), prob=known[i], logit=None, allowed=True)
            for i in sorted(allowed_known, key=lambda i: -known[i])
        )
        if allowed_unknown == 0 and allowed_count <= ALLOWED_LIST_MAX
        else ()
    )
    return MaskedDistribution(
        top=top,
        allowed_count=allowed_count,
        blocked_mass=low,
        blocked_mass_max=max(low, high),
        inexact=("blocked_mass",) if high > low else (),
        known=known,
        top_k_ids=top_k_ids,
        reports_bounds=True,
        allowed_tokens=listed,
    )
