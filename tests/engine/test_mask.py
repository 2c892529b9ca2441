from __future__ import annotations

import pytest
import torch
import xgrammar as xgr

from app.engine.mask import (
    allowed_array,
    allowed_vector,
    bitmask_bytes,
    count_allowed,
    is_allowed,
    words_from_bytes,
)


def _bitmask_allowing(allowed: set[int], vocab_size: int) -> torch.Tensor:
    bitmask: torch.Tensor = xgr.allocate_token_bitmask(1, vocab_size)
    bitmask.zero_()
    for token in allowed:
        bitmask[0, token // 32] |= torch.tensor(1 << (token % 32), dtype=torch.int64).to(
            torch.int32
        )
    return bitmask


def test_unpacking_matches_the_bits_set() -> None:
    allowed = {0, 1, 31, 32, 63, 64, 100, 127}
    words = _bitmask_allowing(allowed, 130)[0]
    vector = allowed_vector(words, 130)
    assert vector.shape == (130,)
    assert set(vector.nonzero().flatten().tolist()) == allowed
    assert all(is_allowed(words, t) == (t in allowed) for t in range(130))
    array = allowed_array(words, 130)
    assert array.dtype == bool and array.tolist() == vector.tolist()


@pytest.mark.parametrize("vocab_size", [96, 130, 160])
def test_the_count_is_the_bits_set_below_the_vocabulary_size(vocab_size: int) -> None:
    allowed = {0, 31, 32, 95, 100, 129, 131, 159}  # some past the smaller vocabularies
    words = _bitmask_allowing(allowed, 160)[0]
    expected = len({t for t in allowed if t < vocab_size})
    assert count_allowed(words, vocab_size) == expected
    assert count_allowed(words, vocab_size) == int(allowed_vector(words, vocab_size).sum())


def test_bytes_are_the_little_endian_words() -> None:
    words = _bitmask_allowing({0, 31, 33}, 64)[0]
    data = bitmask_bytes(words)
    assert data[:4] == bytes([0x01, 0x00, 0x00, 0x80])
    assert data[4:8] == bytes([0x02, 0x00, 0x00, 0x00])
    assert words_from_bytes(data).tolist() == words.tolist()


def test_xgrammar_fills_what_we_unpack() -> None:
    vocab = ["a", "b", "c", "<eos>"]
    info = xgr.TokenizerInfo(vocab, stop_token_ids=[3])
    compiled = xgr.GrammarCompiler(info, cache_enabled=False).compile_grammar('root ::= "a" "b"')
    matcher = xgr.GrammarMatcher(compiled)
    bitmask = xgr.allocate_token_bitmask(1, len(vocab))
    matcher.fill_next_token_bitmask(bitmask)
    assert allowed_vector(bitmask[0], len(vocab)).tolist() == [True, False, False, False]
