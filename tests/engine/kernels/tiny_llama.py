"""Tiny random llamas quantised with gguf-py, for the GGUF kernel's tests (seconds, not the
embedded model's minutes).

Each :class:`TinyLlama` is a transformers llama with random weights whose linear layers were
quantised to GGUF blocks by gguf-py and de-quantised back by gguf-py: its float32 weights are
its blocks' weights exactly, as the embedded model's are. Its GGUF file holds those blocks as
llama.cpp's converter writes them (q and k rows permuted), so :func:`use_gguf_blocks` reads it
as it reads the embedded model's. Also run as a script by the sanitizer test
(``python -m tests.engine.kernels.tiny_llama LIBRARY...``): the kernels' core calls on every
tiny llama, with each library given.
"""

from __future__ import annotations

import copy
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from gguf import GGMLQuantizationType, GGUFWriter, quants
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

from app.engine.kernels.gguf import (
    MAX_KERNEL_ROWS,
    PROJECTIONS,
    Decoder,
    Kernels,
    use_gguf_blocks,
)
from app.engine.model.forward.batch import Batcher, GrowingLayer

Q4_1, Q8_0 = GGMLQuantizationType.Q4_1, GGMLQuantizationType.Q8_0

#: Every block type the kernel takes (q41_mm, q80_mm): each tiny llama has a layer of each.
BLOCK_TYPES = (Q4_1, Q8_0)


@dataclass(frozen=True)
class Shape:
    """A tiny llama's shape: head width, query and key heads, and each layer's block type."""

    name: str
    head_dim: int
    heads: int
    kv_heads: int
    layers: tuple[GGMLQuantizationType, ...] = BLOCK_TYPES
    hidden: int = 128
    intermediate: int = 96
    vocab: int = 160


#: Head widths 32, 64 and 128; grouped-query (2 and 4 queries a key head) and plain attention.
SHAPES = (
    Shape("d32 gqa", head_dim=32, heads=4, kv_heads=2),
    Shape("d64 mqa", head_dim=64, heads=4, kv_heads=1),
    Shape("d128 mha", head_dim=128, heads=2, kv_heads=2),
)


@dataclass
class TinyLlama:
    """A tiny llama twice: ``reference`` runs torch's float32 matmuls, ``model`` the kernels'
    blocks once :meth:`with_kernels` swapped them in; ``gguf`` is its blocks' file."""

    shape: Shape
    reference: Any
    gguf: Path

    def with_kernels(self, kernels: Kernels) -> Any:
        """A copy of the reference whose linear layers and head run from the blocks."""
        model = copy.deepcopy(self.reference)
        swapped = use_gguf_blocks(model, self.gguf, kernels)
        assert swapped == 7 * len(self.shape.layers) + 1
        return model


def _permuted(rows: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's converter's q/k row order (the reverse of transformers')."""
    return (
        rows.reshape(heads, 2, rows.shape[0] // heads // 2, *rows.shape[1:])
        .swapaxes(1, 2)
        .reshape(rows.shape)
    )


def _quantised(weight: torch.Tensor, kind: GGMLQuantizationType) -> np.ndarray:
    """``weight``'s blocks; ``weight`` becomes exactly their float32 weights (in place)."""
    blocks: np.ndarray = quants.quantize(weight.detach().numpy(), kind)
    with torch.no_grad():
        weight.copy_(torch.from_numpy(quants.dequantize(blocks, kind)))
    return blocks


def make_tiny_llama(shape: Shape, directory: Path, seed: int = 0) -> TinyLlama:
    """A random llama of ``shape``, quantised with gguf-py into ``directory``."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=shape.vocab, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
        num_hidden_layers=len(shape.layers), num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads, head_dim=shape.head_dim,
        max_position_embeddings=512, tie_word_embeddings=True, initializer_range=0.1,
    )  # fmt: skip
    model = LlamaForCausalLM(config).eval()
    path = directory / f"tiny-{shape.name.replace(' ', '-')}.gguf"
    writer = GGUFWriter(path, "llama")
    writer.add_block_count(len(shape.layers))
    embed = _quantised(model.model.embed_tokens.weight, Q8_0)  # the tied head's too
    writer.add_tensor("token_embd.weight", embed, raw_dtype=Q8_0)
    for index, kind in enumerate(shape.layers):
        layer = model.model.layers[index]
        with torch.no_grad():  # RMSNorm weights away from 1, so a wrong norm shows
            for norm in (layer.input_layernorm, layer.post_attention_layernorm):
                norm.weight.copy_(1 + 0.2 * torch.randn(shape.hidden))
        for name, module in PROJECTIONS.items():
            blocks = _quantised(layer.get_submodule(module).weight, kind)
            if name in ("attn_q", "attn_k"):
                blocks = _permuted(blocks, shape.heads if name == "attn_q" else shape.kv_heads)
            writer.add_tensor(f"blk.{index}.{name}.weight", blocks, raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return TinyLlama(shape, model, path)


def reference_logits(tiny: TinyLlama, prompt: list[int], steps: list[int]) -> list[torch.Tensor]:
    """The reference's next-token logits after ``prompt`` and after each of ``steps``."""
    cache = DynamicCache(config=tiny.reference.config)
    with torch.inference_mode():
        out = tiny.reference(input_ids=torch.tensor([prompt]), cache=cache)
        logits = [out.logits[0, -1]]
        for token in steps:
            out = tiny.reference(input_ids=torch.tensor([[token]]), cache=cache)
            logits.append(out.logits[0, -1])
    return logits


def decoded_logits(
    model: Any, kernels: Kernels, prompts: list[list[int]], steps: list[int]
) -> list[list[torch.Tensor]]:
    """Each prompt's logits after it (the engine's batcher's prefill, through the modules) and
    after each of ``steps``, every prompt's step decoded together in one call of the kernels'
    decoder, as the batcher's batched step calls it."""
    decoder = Decoder.of(model, kernels)
    assert decoder is not None
    batcher = Batcher(model, device=torch.device("cpu"), lock=threading.Lock(),
                      attend=kernels.attend, attend_rows=kernels.attend_rows, decoder=decoder,
                      prompt_cache_bytes=0)  # fmt: skip
    caches = [batcher.new_cache() for _ in prompts]
    logits = [
        [batcher.prefill(cache, prompt)] for cache, prompt in zip(caches, prompts, strict=True)
    ]
    layers = [cast(list[GrowingLayer], cache.layers) for cache in caches]
    for token in steps:
        slots = [
            [layer.slot(decoder.template, decoder.template) for layer in row] for row in layers
        ]
        out = decoder.decode([token] * len(prompts), slots)
        assert out is not None
        for row, row_layers, row_logits in zip(logits, layers, out, strict=True):
            row.append(row_logits)
            for layer in row_layers:
                layer.advance()
    return logits


def exercise(kernels: Kernels, tiny: TinyLlama) -> None:
    """The kernels' core calls on ``tiny``: every layer's product at each row count, one-token
    attention alone and batched, and the decoder's steps for one row and for three."""
    model = tiny.with_kernels(kernels)
    generator = torch.Generator().manual_seed(1)
    with torch.inference_mode():
        for linear in (model.model.layers[0].self_attn.q_proj, model.lm_head):
            for rows in range(1, MAX_KERNEL_ROWS + 1):
                linear(torch.randn(rows, linear.in_features, generator=generator))
        query = torch.randn(1, tiny.shape.heads, 1, tiny.shape.head_dim, generator=generator)
        keys = torch.randn(1, tiny.shape.kv_heads, 9, tiny.shape.head_dim, generator=generator)
        assert kernels.attend(query, keys, keys, 0.1) is not None
    prompts = [[1, 2, 3, 4, 5], list(range(10, 30)), [7]]
    decoded_logits(model, kernels, prompts, [8, 9, 10])
    decoded_logits(model, kernels, prompts[:1], [8, 9])


def main(libraries: list[str]) -> int:
    """Run :func:`exercise` with each library on every tiny llama; print ``ok`` at the end."""
    with tempfile.TemporaryDirectory() as work:
        tinies = [make_tiny_llama(shape, Path(work)) for shape in SHAPES]
        for library in libraries:
            kernels = Kernels.open(Path(library))
            for tiny in tinies:
                exercise(kernels, tiny)
            print(f"{kernels.isa}: ok", flush=True)
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
