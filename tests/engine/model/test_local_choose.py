"""The local model's token choice without a copy of the logits picks what masking a copy picks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import xgrammar as xgr

from app.engine.mask import new_bitmask
from app.engine.model.forward.local import choose_under_mask
from app.engine.model.sampling import SamplingParams, choose_token

VOCAB = 1000  # not a multiple of 32: the last word is partly past the vocabulary
GREEDY = SamplingParams()


def _reference(logits: torch.Tensor, bitmask: torch.Tensor, sampling: SamplingParams) -> int:
    masked = logits.unsqueeze(0).clone()
    xgr.apply_token_bitmask_inplace(masked, bitmask)
    return choose_token(masked[0], sampling, 0)


def _mask(allowed: list[int], vocab: int = VOCAB) -> torch.Tensor:
    words = np.zeros(new_bitmask(vocab).shape[1], dtype=np.uint32)
    for token in allowed:
        words[token >> 5] |= np.uint32(1 << (token & 31))
    return torch.from_numpy(words.view(np.int32).copy()).unsqueeze(0)


@pytest.mark.parametrize("seed", range(20))
def test_greedy_choice_is_the_masked_argmax(seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(VOCAB, generator=generator)
    allowed = torch.randperm(VOCAB, generator=generator)[: 1 + seed * 37].tolist()
    if seed % 2:  # the raw argmax allowed: the path that reads one bit
        allowed.append(int(torch.argmax(logits)))
    bitmask = _mask(allowed)
    before = logits.clone()
    chosen = choose_under_mask(logits, bitmask, GREEDY, 0)
    assert chosen == _reference(logits, bitmask, GREEDY)
    assert chosen in allowed
    assert torch.equal(logits, before)  # the step's checks read the raw logits afterwards


def test_ties_take_the_first_allowed_index_as_the_kernel_does() -> None:
    logits = torch.zeros(VOCAB)
    logits[[5, 40, 31, 900]] = 3.0
    for allowed in ([40, 900, 31], [900, 40], [5, 40], [7, 999], []):
        bitmask = _mask(allowed)
        assert choose_under_mask(logits, bitmask, GREEDY, 0) == _reference(logits, bitmask, GREEDY)


def test_a_bit_set_past_the_vocabulary_is_not_chosen_when_the_logits_end_first() -> None:
    logits = torch.zeros(VOCAB - 8)  # fewer logits than the mask's bits
    logits[3] = 1.0
    bitmask = _mask([3, VOCAB - 1])
    assert choose_under_mask(logits, bitmask, GREEDY, 0) == 3


def test_sampling_still_draws_from_the_masked_copy() -> None:
    generator = torch.Generator().manual_seed(1)
    logits = torch.randn(VOCAB, generator=generator)
    bitmask = _mask(list(range(0, VOCAB, 7)))
    sampling = SamplingParams(temperature=0.8, top_p=0.9, seed=11)
    for index in range(10):
        masked = logits.unsqueeze(0).clone()
        xgr.apply_token_bitmask_inplace(masked, bitmask)
        assert choose_under_mask(logits, bitmask, sampling, index) == choose_token(
            masked[0], sampling, index
        )
