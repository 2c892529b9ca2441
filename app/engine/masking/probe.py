"""The mask/accept cross-check: does the mask say what ``accept_token`` does?

The chosen token alone proves nothing (it was picked from the masked logits, or checked against
the mask when forced), so each step also tries the raw distribution's top tokens and a seeded
sample of other allowed and blocked ids, and lists every token whose mask bit and
``accept_token`` answer differ: over-masking and under-masking both show.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.engine.masking.base import MaskingEngine
from app.engine.records import Disagreement, Probe

__all__ = ["PROBE_SAMPLE", "probe_ids", "probe_mask"]

#: allowed ids, and as many blocked ids, sampled at each step besides the chosen and top tokens
PROBE_SAMPLE = 16


def probe_ids(allowed: np.ndarray, *, chosen: int, top: Sequence[int], index: int) -> list[int]:
    """The ids to check at step ``index``: ``chosen``, ``top``, then the seeded sample.

    The sample of other ids depends only on the mask and ``index``, so records repeat.

    Args:
        allowed: the mask as one bool per token id.
        chosen: the token taken at this step.
        top: the top tokens of the raw distribution.
        index: the step index, which seeds the sample.
    """
    named = list(dict.fromkeys([chosen, *top]))
    rng = np.random.default_rng(index)
    sample: list[int] = []
    for side in (allowed.copy(), ~allowed):
        side[named] = False
        pool = np.flatnonzero(side)
        size = min(PROBE_SAMPLE, len(pool))
        sample += rng.choice(pool, size=size, replace=False).tolist()
    return named + sample


def probe_mask(
    masking: MaskingEngine, allowed: np.ndarray, *, chosen: int, top: Sequence[int], index: int
) -> Probe:
    """Try each id of :func:`probe_ids` in the current state and compare with its mask bit.

    The state is unchanged afterwards (:meth:`MaskingEngine.probe_token`).
    """
    token_ids = probe_ids(allowed, chosen=chosen, top=top, index=index)
    disagree = []
    for token_id in token_ids:
        accept = masking.probe_token(token_id)
        mask = bool(allowed[token_id])
        if accept != mask:
            disagree.append(Disagreement(token_id=token_id, mask=mask, accept=accept))
    return Probe(checked=len(token_ids), disagree=tuple(disagree))
