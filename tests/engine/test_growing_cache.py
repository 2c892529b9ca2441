"""The growing cache layer (``forward/batch.py``) holds what transformers' ``DynamicLayer`` holds,
through appends and crops, while appending in place."""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicLayer

from app.engine.forward.batch import GrowingLayer


def _kv(tokens: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return (
        torch.randn(1, 3, tokens, 8, generator=generator),
        torch.randn(1, 3, tokens, 8, generator=generator),
    )


def test_appends_and_crops_hold_what_a_dynamic_layer_holds() -> None:
    growing, dynamic = GrowingLayer(), DynamicLayer()
    moves = [("add", 40), ("add", 1), ("add", 1), ("crop", 2), ("add", 1), ("add", 90),
             ("crop", 30), ("add", 1), ("add", 1)]  # fmt: skip
    for seed, (move, count) in enumerate(moves):
        if move == "add":
            keys, values = _kv(count, seed)
            got = growing.update(keys, values)
            want = dynamic.update(keys, values)
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), seed
        else:
            growing.crop(-count)
            dynamic.crop(-count)
        assert growing.get_seq_length() == dynamic.get_seq_length(), seed
        assert torch.equal(growing.keys, dynamic.keys), seed
        assert torch.equal(growing.values, dynamic.values), seed
    assert growing.held_bytes >= 2 * growing.keys.numel() * growing.keys.element_size()


def test_a_token_is_written_in_place_while_there_is_room() -> None:
    layer = GrowingLayer()
    layer.update(*_kv(100, 0))
    start = layer.keys.data_ptr()
    for seed in range(1, 20):
        layer.update(*_kv(1, seed))
        if seed == 10:
            layer.crop(-3)  # a back: the next token overwrites past the view
    assert layer.keys.data_ptr() == start, "no copy of the layer"
    assert layer.get_seq_length() == 100 + 19 - 3
