"""The growing cache layer (``forward/batch.py``) holds what transformers' ``DynamicLayer`` holds,
through appends and crops, while appending in place."""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicLayer

from app.engine.model.forward.batch import GrowingLayer


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


def test_a_slot_a_kernel_writes_into_holds_what_an_update_appends() -> None:
    growing, dynamic = GrowingLayer(), DynamicLayer()
    for layer in (growing, dynamic):
        layer.update(*_kv(40, 0))
    for seed in range(1, 80):  # past the first buffers' room: the slot grows them
        keys, values = _kv(1, seed)
        pointers = growing.slot(keys, values)
        assert pointers[2] == growing.get_seq_length() == dynamic.get_seq_length()  # held
        buffers = growing._buffers
        assert buffers is not None and pointers[0] == buffers[0].data_ptr()
        # What the kernel does: write the token at the place held, in every head.
        buffers[0][:, :, pointers[2]] = keys[:, :, 0]
        buffers[1][:, :, pointers[2]] = values[:, :, 0]
        growing.advance()
        dynamic.update(keys, values)
        assert torch.equal(growing.keys, dynamic.keys), seed
        assert torch.equal(growing.values, dynamic.values), seed
        if seed == 30:
            growing.crop(-3)
            dynamic.crop(-3)
    strides, buffers = growing.slot(*_kv(1, 0))[3:], growing._buffers
    assert buffers is not None and strides == (buffers[0].stride(1), buffers[1].stride(1))


def test_tokens_a_kernel_wrote_unread_are_held_through_growth_and_crops() -> None:
    """The views are made again only when read: several slots in a row, one growing the
    buffers, then a crop, then an update, hold what a DynamicLayer holds."""
    growing, dynamic = GrowingLayer(), DynamicLayer()
    for layer in (growing, dynamic):
        layer.update(*_kv(62, 0))
    for seed in range(1, 8):  # 62 + 7: past the first buffers' room (64), none read
        keys, values = _kv(1, seed)
        held = growing.slot(keys, values)[2]
        assert held == growing.get_seq_length() == dynamic.get_seq_length(), seed
        buffers = growing._buffers
        assert buffers is not None
        buffers[0][:, :, held] = keys[:, :, 0]
        buffers[1][:, :, held] = values[:, :, 0]
        growing.advance()
        dynamic.update(keys, values)
    growing.crop(-2)
    dynamic.crop(-2)
    for layer in (growing, dynamic):
        layer.update(*_kv(3, 99))
    assert growing.get_seq_length() == dynamic.get_seq_length() == 62 + 7 - 2 + 3
    assert torch.equal(growing.keys, dynamic.keys)
    assert torch.equal(growing.values, dynamic.values)
