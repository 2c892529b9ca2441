"""Speculative drafts as production runs them: proposed without the mask, validated by the grammar.

A draft model (or vLLM's n-gram prompt lookup) proposes tokens without seeing the grammar, so the
grammar may refuse them. vLLM 0.32.0's ``StructuredOutputManager.grammar_bitmask``
(``vllm/v1/structured_output/__init__.py``) then fills one mask per draft position, advancing the
matcher by each draft until the first one it refuses (or until it terminates), fills the bonus
position's mask, and rolls the matcher back by the drafts it took. That rollback is where
production has seen corrupted state, so the stepper checks it
(:mod:`app.engine.masking.rollback_check`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from app.engine.mask import new_bitmask
from app.engine.masking.base import MaskingEngine

__all__ = ["NGRAM_MAX", "NGRAM_MIN", "DraftValidation", "propose_drafts", "validate_drafts"]

#: the longest and shortest suffix looked up in the context (vLLM's prompt_lookup_max / _min)
NGRAM_MAX = 3
NGRAM_MIN = 1


def propose_drafts(context: Sequence[int], n: int) -> list[int]:
    """Up to ``n`` draft tokens by prompt lookup: the tokens that followed the latest earlier
    occurrence of the context's longest matching suffix (``NGRAM_MAX`` down to ``NGRAM_MIN``).

    Args:
        context: the prompt's ids, then the generated ids.
        n: the most drafts wanted.
    """
    if n < 1:
        return []
    ids = list(context)
    for size in range(min(NGRAM_MAX, len(ids) - 1), NGRAM_MIN - 1, -1):
        suffix = ids[-size:]
        # the latest earlier occurrence: its continuation is the most recent evidence
        for start in range(len(ids) - size - 1, -1, -1):
            if ids[start : start + size] == suffix:
                return ids[start + size : start + size + n]
    return []


@dataclass(frozen=True, slots=True)
class DraftValidation:
    """What validating the drafts did to the matcher.

    Attributes:
        proposed: the drafts tried.
        accepted: how many the grammar took in turn (the matcher was advanced by as many, then
            rolled back).
        first_mask: the mask filled before any draft advanced the matcher (position 0).
    """

    proposed: int
    accepted: int
    first_mask: torch.Tensor


def validate_drafts(
    masking: MaskingEngine, drafts: Sequence[int], vocab_size: int
) -> DraftValidation:
    """Fill the masks of every draft position as vLLM's ``grammar_bitmask`` does, then roll back.

    Advances ``masking`` by each draft until the first it refuses or until it terminates, filling
    one mask per position (and the bonus position's), then rolls back the drafts it took. A
    correct rollback leaves ``masking`` as it was.
    """
    first = new_bitmask(vocab_size)
    scratch = new_bitmask(vocab_size)  # the later positions' masks: filled, then not needed
    advanced = 0
    failed = False
    try:
        for i, token in enumerate(drafts):
            masking.fill_next_token_bitmask(first if i == 0 else scratch)
            if masking.is_terminated() or not masking.accept_token(token):
                failed = True
                break
            advanced += 1
        if not failed:
            masking.fill_next_token_bitmask(first if not drafts else scratch)
    finally:
        masking.rollback(advanced)  # whatever failed: the drafts leave no trace
    return DraftValidation(proposed=len(drafts), accepted=advanced, first_mask=first)
