"""The shadow continuation: what the model writes from a step with no mask at all, beside what
it wrote under the grammar.

The shadow runs a forward engine of its own (the session's prefix up to the step, then its own
tokens), so the session is never touched; it draws its tokens as the session would (greedy, or
the session's sampling with the draw of position i depending only on (seed, i)), from the
whole vocabulary. It can be cancelled between two tokens.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from app.engine.mask import new_bitmask
from app.engine.model.forward.base import RawDistribution, ServingModel
from app.engine.model.prompt import Prompt
from app.engine.model.sampling import SamplingParams
from app.engine.records import StepRecord
from app.exceptions import InvalidInput

__all__ = ["DEFAULT_SHADOW_TOKENS", "ShadowResult", "ShadowToken", "parting", "shadow"]

#: Tokens a shadow continuation generates unless told.
DEFAULT_SHADOW_TOKENS = 32


@dataclass(frozen=True, slots=True)
class ShadowToken:
    """One token of the shadow: its id, spelling and raw probability (None when the engine
    returned no figure for it)."""

    token_id: int
    text: str
    prob: float | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"token_id": self.token_id, "text": self.text, "prob": self.prob}


@dataclass(frozen=True, slots=True)
class ShadowResult:
    """A shadow continuation from step ``start``, against the constrained steps from there.

    Attributes:
        start: the step it starts at (0: right after the prompt).
        tokens: its tokens, a stop token last when it ended on one.
        text: their text (stop tokens left out).
        parts_at: the first step index (from ``start``) where the shadow's token differs from
            the session's, or None when they agree as far as both go.
        removed_mass_until: the raw probability the mask removed on the constrained path, summed
            over the steps from ``start`` up to ``parts_at`` included (to the last step compared
            when they never part).
        cancelled: it was cancelled before its last token.
    """

    start: int
    tokens: tuple[ShadowToken, ...]
    text: str
    parts_at: int | None
    removed_mass_until: float
    cancelled: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: ``{"from", "tokens", "text", "parts_at", "removed_mass_until",
        "cancelled"}``."""
        return {
            "from": self.start,
            "tokens": [t.to_dict() for t in self.tokens],
            "text": self.text,
            "parts_at": self.parts_at,
            "removed_mass_until": self.removed_mass_until,
            "cancelled": self.cancelled,
        }


def _prob(raw: RawDistribution, token: int) -> float | None:
    """The raw probability of ``token`` (temperature 1), from what the engine returned."""
    if raw.logits is not None:
        return float(torch.softmax(raw.logits.float(), dim=-1)[token])
    known = dict(raw.top_logprobs) | dict(raw.extra_logprobs)
    return math.exp(known[token]) if token in known else None


def parting(
    records: Sequence[StepRecord], start: int, token_ids: Sequence[int]
) -> tuple[int | None, float]:
    """Where ``token_ids`` (a continuation from step ``start``) parts from the records' tokens,
    and the mass the mask removed on the records' path up to there (see :class:`ShadowResult`)."""
    compared = records[start : start + len(token_ids)]
    parts_at = next(
        (r.index for r, t in zip(compared, token_ids, strict=False) if r.token_id != t), None
    )
    until = len(compared) if parts_at is None else parts_at - start + 1
    return parts_at, sum(r.blocked_mass for r in compared[:until])


def shadow(
    model: ServingModel,
    prompt: Prompt,
    records: Sequence[StepRecord],
    *,
    start: int = 0,
    tokens: int = DEFAULT_SHADOW_TOKENS,
    sampling: SamplingParams | None = None,
    cancel: threading.Event | None = None,
) -> ShadowResult:
    """The model's continuation from step ``start`` of ``records`` with no mask.

    Args:
        model: the session's model (local, or a remote engine with a forward pass).
        prompt: the session's prompt.
        records: the session's steps so far; the shadow continues after ``records[:start]``.
        start: the step to start at, 0 to ``len(records)``.
        tokens: how many tokens at most (fewer when a stop token comes first).
        sampling: greedy when None, else the session's sampling (the same draw per position).
        cancel: set to stop before the next token.

    Raises:
        InvalidInput: ``start`` outside the steps, or ``tokens`` below 1.
    """
    if not 0 <= start <= len(records):
        raise InvalidInput(f"from must be between 0 and {len(records)}, got {start}")
    if tokens < 1:
        raise InvalidInput(f"tokens must be at least 1, got {tokens}")
    vocab = model.tokens
    forward = model.open_forward([*prompt.token_ids, *(r.token_id for r in records[:start])])
    everything = new_bitmask(vocab.vocab_size)
    chosen: list[ShadowToken] = []
    cancelled = False
    while len(chosen) < tokens:
        if cancel is not None and cancel.is_set():
            cancelled = True
            break
        raw = forward.distribution()
        index = start + len(chosen)
        token = forward.choose(raw, everything, sampling or SamplingParams(), index=index)
        chosen.append(ShadowToken(token, vocab.text(token), _prob(raw, token)))
        if token in vocab.stop_ids:
            break
        forward.extend(token)
    ids = [t.token_id for t in chosen]
    text = b"".join(vocab.output_bytes(t) for t in ids).decode("utf-8", errors="replace")
    parts_at, removed = parting(records, start, ids)
    return ShadowResult(start, tuple(chosen), text, parts_at, removed, cancelled)
