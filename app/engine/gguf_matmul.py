"""The embedded model's linear layers run from the GGUF's blocks: float32, a fifth of the bytes.

The embedded checkpoint is the GGUF de-quantised once: every float32 weight of a decoder linear
layer is exactly ``d * q + m`` of its Q4_1 block (32 weights, a 4-bit ``q`` each, ``d`` and ``m``
float16), and every weight of the tied embeddings / head exactly ``q * d`` of its Q8_0 block.
A decoding step on CPU is bound by the memory bandwidth of reading those float32 weights (about
540 MB a token); the blocks hold the same weights in about 110 MB. :class:`BlockLinear` computes
a layer's product from the blocks, with the very float32 weights (made in registers, in the
order numpy made them) and float32 accumulation: only the order of the sums differs from torch's
float32 matmul, as it differs between thread counts.

The kernel is C, compiled once per machine into the cache directory (``cc``; about a second);
without a compiler, or on inputs it does not take (more than :data:`MAX_KERNEL_ROWS` rows, a
prompt's prefill for one, another dtype or device), a layer runs torch's float32 matmul on the
weights it keeps. Every block is checked bit for bit against the loaded float32 weight first.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["MAX_KERNEL_ROWS", "BlockLinear", "GgufMatmulError", "Kernels", "use_gguf_blocks"]

log = logging.getLogger(__name__)

#: The most rows (sessions in one batched step) the kernel takes; more run torch's matmul,
#: which reads the float32 weights once for all of them.
MAX_KERNEL_ROWS = 8

_BLOCK = 32
_Q4_1, _Q8_0 = 3, 8  # ggml's type numbers

# Weights are made exactly as numpy de-quantised them (a product, then a sum: no fused
# multiply-add, hence -ffp-contract=off); the dot products accumulate with fmaf, 32 lanes.
_SOURCE = r"""
#include <stdint.h>
#include <math.h>
#define ROWS 8

static void finish(float acc[ROWS][32], int64_t rows, int64_t r0, int64_t N, int64_t n,
                   float *y) {
    for (int64_t r = 0; r < rows; r++) {
        float s = 0;
        for (int j = 0; j < 32; j++) s += acc[r][j];
        y[(r0 + r) * N + n] = s;
    }
}

void q41_mm(const float *x, int64_t M, int64_t K, const uint8_t *qs, const float *d,
            const float *mn, int64_t N, float *y) {
    int64_t KB = K / 32;
    for (int64_t r0 = 0; r0 < M; r0 += ROWS) {
        int64_t rows = M - r0 < ROWS ? M - r0 : ROWS;
        for (int64_t n = 0; n < N; n++) {
            float acc[ROWS][32] = {{0}};
            for (int64_t b = 0; b < KB; b++) {
                const uint8_t *q = qs + (n * KB + b) * 16;
                float dd = d[n * KB + b], mm = mn[n * KB + b], w[32];
                for (int j = 0; j < 16; j++) {
                    w[j] = dd * (float)(q[j] & 15) + mm;
                    w[j + 16] = dd * (float)(q[j] >> 4) + mm;
                }
                for (int64_t r = 0; r < rows; r++) {
                    const float *xr = x + (r0 + r) * K + b * 32;
                    for (int j = 0; j < 32; j++) acc[r][j] = fmaf(w[j], xr[j], acc[r][j]);
                }
            }
            finish(acc, rows, r0, N, n, y);
        }
    }
}

void q80_mm(const float *x, int64_t M, int64_t K, const int8_t *qs, const float *d,
            int64_t N, float *y) {
    int64_t KB = K / 32;
    for (int64_t r0 = 0; r0 < M; r0 += ROWS) {
        int64_t rows = M - r0 < ROWS ? M - r0 : ROWS;
        for (int64_t n = 0; n < N; n++) {
            float acc[ROWS][32] = {{0}};
            for (int64_t b = 0; b < KB; b++) {
                const int8_t *q = qs + (n * KB + b) * 32;
                float dd = d[n * KB + b], w[32];
                for (int j = 0; j < 32; j++) w[j] = (float)q[j] * dd;
                for (int64_t r = 0; r < rows; r++) {
                    const float *xr = x + (r0 + r) * K + b * 32;
                    for (int j = 0; j < 32; j++) acc[r][j] = fmaf(w[j], xr[j], acc[r][j]);
                }
            }
            finish(acc, rows, r0, N, n, y);
        }
    }
}
"""
_FLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-shared", "-fPIC")


class GgufMatmulError(Exception):
    """The blocks cannot stand for the loaded weights (no compiler, a mismatch, a layout)."""


class Kernels:
    """The compiled kernels (thread-safe: they hold no state; ctypes drops the GIL in them)."""

    def __init__(self, library: ctypes.CDLL) -> None:
        pointer, size = ctypes.c_void_p, ctypes.c_int64
        self._q41 = library.q41_mm
        self._q41.argtypes = [pointer, size, size, pointer, pointer, pointer, size, pointer]
        self._q41.restype = None
        self._q80 = library.q80_mm
        self._q80.argtypes = [pointer, size, size, pointer, pointer, size, pointer]
        self._q80.restype = None

    @classmethod
    def build(cls, cache_dir: Path) -> Kernels:
        """Compile the kernels once for this machine (cached in ``cache_dir``) and load them.

        Raises:
            GgufMatmulError: no C compiler, or it failed.
        """
        compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
        if compiler is None:
            raise GgufMatmulError("no C compiler (cc) to build the GGUF block kernel")
        # -march=native: the library is this CPU's; a cache shared across machines keeps one each.
        key = hashlib.sha256(
            "\0".join((_SOURCE, *_FLAGS, compiler, platform.machine(), _cpu_flags())).encode()
        ).hexdigest()[:16]
        target = cache_dir / "kernels" / f"gguf-matmul-{key}.so"
        if not target.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=target.parent) as work:
                source = Path(work) / "gguf_matmul.c"
                source.write_text(_SOURCE)
                built = Path(work) / target.name
                try:
                    subprocess.run(
                        [compiler, *_FLAGS, "-o", str(built), str(source)],
                        check=True,
                        capture_output=True,
                        timeout=120,
                    )
                except (OSError, subprocess.SubprocessError) as exc:
                    detail = getattr(exc, "stderr", b"") or b""
                    raise GgufMatmulError(
                        f"building the GGUF block kernel failed: {exc} {detail.decode()[-500:]}"
                    ) from exc
                os.replace(built, target)  # atomic: a racing process loads a whole library
        return cls(ctypes.CDLL(str(target)))

    def q41(self, x: torch.Tensor, layer: _Blocks, out: torch.Tensor) -> None:
        """``out = x @ W.T`` for a Q4_1 layer (x and out contiguous float32 on cpu)."""
        rows, width = x.shape
        assert layer.mins is not None
        self._q41(
            x.data_ptr(),
            rows,
            width,
            layer.quants.data_ptr(),
            layer.scales.data_ptr(),
            layer.mins.data_ptr(),
            layer.outputs,
            out.data_ptr(),
        )

    def q80(self, x: torch.Tensor, layer: _Blocks, out: torch.Tensor) -> None:
        """``out = x @ W.T`` for a Q8_0 layer (x and out contiguous float32 on cpu)."""
        rows, width = x.shape
        self._q80(
            x.data_ptr(),
            rows,
            width,
            layer.quants.data_ptr(),
            layer.scales.data_ptr(),
            layer.outputs,
            out.data_ptr(),
        )


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return platform.processor()


@dataclass(frozen=True)
class _Blocks:
    """One layer's blocks: quants (packed nibbles or int8), float32 scales (and mins)."""

    kind: int
    quants: torch.Tensor
    scales: torch.Tensor
    mins: torch.Tensor | None
    outputs: int

    def dequantised(self) -> np.ndarray:
        """The float32 weights, made as the GGUF loader made them."""
        d = self.scales.numpy()[..., None]
        made: np.ndarray
        if self.kind == _Q8_0:
            made = self.quants.numpy().astype(np.float32) * d
        else:
            assert self.mins is not None
            packed = self.quants.numpy()
            q = np.concatenate([packed & 15, packed >> 4], axis=-1).astype(np.float32)
            made = d * q + self.mins.numpy()[..., None]
        return made.reshape(self.outputs, -1)

    def permuted(self, heads: int) -> _Blocks:
        """The rows in transformers' order for a llama q/k projection (its reverse permute)."""
        order = np.arange(self.outputs)
        order = order.reshape(heads, self.outputs // heads // 2, 2).swapaxes(2, 1).reshape(-1)

        def rows(tensor: torch.Tensor) -> torch.Tensor:
            return torch.from_numpy(np.take(tensor.numpy(), order, axis=0))

        mins = None if self.mins is None else rows(self.mins)
        return _Blocks(self.kind, rows(self.quants), rows(self.scales), mins, self.outputs)


class BlockLinear(torch.nn.Module):
    """A bias-free linear layer computed from its GGUF blocks (see the module's docstring).

    It keeps the layer's float32 ``weight`` (shared with the embeddings when they are tied):
    a prompt's prefill and large batches run torch's matmul on it.
    """

    def __init__(self, weight: torch.nn.Parameter, blocks: _Blocks, kernels: Kernels) -> None:
        super().__init__()
        self.weight = weight
        self.out_features, self.in_features = weight.shape
        self._blocks = blocks
        self._kernels = kernels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x @ weight.T``, from the blocks when the kernel takes ``x``."""
        rows = x.numel() // self.in_features if self.in_features else 0
        if (
            not 0 < rows <= MAX_KERNEL_ROWS
            or x.dtype != torch.float32
            or x.device.type != "cpu"
            or (torch.is_grad_enabled() and x.requires_grad)
        ):
            return torch.nn.functional.linear(x, self.weight)
        flat = x.reshape(rows, self.in_features).contiguous()
        out = torch.empty(rows, self.out_features, dtype=torch.float32)
        if self._blocks.kind == _Q4_1:
            self._kernels.q41(flat, self._blocks, out)
        else:
            self._kernels.q80(flat, self._blocks, out)
        return out.reshape(*x.shape[:-1], self.out_features)


@dataclass(frozen=True)
class _Tensor:
    """A tensor of a GGUF file: its name, ggml type, shape (ggml's order) and raw bytes."""

    name: str
    kind: int
    shape: tuple[int, ...]
    data: np.ndarray


_SCALARS = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9
_BLOCK_BYTES = {_Q4_1: 20, _Q8_0: 34}  # bytes of one block of 32 weights


def _gguf_tensors(path: Path) -> list[_Tensor]:
    """The Q4_1 and Q8_0 tensors of a GGUF file (version 2 or 3), memory-mapped.

    gguf's own reader turns each of the tokenizer's 100,000 strings into numpy views (seconds);
    only the tensors are needed here, so the metadata is skipped.
    """
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    at = 0

    def take(count: int) -> bytes:
        nonlocal at
        chunk = raw[at : at + count].tobytes()
        at += count
        return chunk

    def number(size: int) -> int:
        return int.from_bytes(take(size), "little")

    def skip(kind: int) -> None:
        nonlocal at
        if kind == _STRING:
            length = number(8)  # read first: ``at += number(8)`` would add to the old ``at``
            at += length
        elif kind == _ARRAY:
            inner, count = number(4), number(8)
            if inner in _SCALARS:
                at += _SCALARS[inner] * count
            else:
                for _ in range(count):
                    skip(inner)
        elif kind in _SCALARS:
            at += _SCALARS[kind]
        else:
            raise GgufMatmulError(f"{path.name}: unknown GGUF value type {kind}")

    if take(4) != b"GGUF" or number(4) not in (2, 3):
        raise GgufMatmulError(f"{path.name} is not a GGUF file of version 2 or 3")
    tensor_count, field_count = number(8), number(8)
    alignment = 32
    for _ in range(field_count):
        key = take(number(8)).decode()
        kind = number(4)
        if key == "general.alignment" and kind == 4:
            alignment = number(4)
        else:
            skip(kind)
    infos = []
    for _ in range(tensor_count):
        name = take(number(8)).decode()
        shape = tuple(number(8) for _ in range(number(4)))
        infos.append((name, number(4), shape, number(8)))
    start = -(-at // alignment) * alignment
    tensors = []
    for name, kind, shape, offset in infos:
        if kind not in _BLOCK_BYTES or len(shape) != 2 or shape[0] % _BLOCK:
            continue
        size = shape[1] * shape[0] // _BLOCK * _BLOCK_BYTES[kind]
        data = raw[start + offset : start + offset + size].reshape(shape[1], -1)
        tensors.append(_Tensor(name, kind, shape, data))
    return tensors


def _read_blocks(tensor: _Tensor) -> _Blocks:
    outputs = tensor.shape[1]
    blocks = np.asarray(tensor.data).reshape(outputs, -1, _BLOCK_BYTES[tensor.kind])
    # Q4_1: d, m (float16), 16 bytes of nibbles; Q8_0: d (float16), 32 int8.
    scales = blocks[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
    if tensor.kind == _Q4_1:
        mins = blocks[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32)
        quants = blocks[..., 4:].copy()
    else:
        mins = None
        quants = blocks[..., 2:].copy().view(np.int8)
    return _Blocks(
        tensor.kind,
        torch.from_numpy(quants),
        torch.from_numpy(scales),
        None if mins is None else torch.from_numpy(mins),
        outputs,
    )


_PROJECTIONS = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def _matching(blocks: _Blocks, weight: torch.Tensor, heads: tuple[int, ...]) -> _Blocks | None:
    """The blocks (rows permuted if need be) whose weights are bit for bit ``weight``'s."""
    target = weight.detach().numpy().view(np.uint32)
    # transformers permutes a llama's q/k rows: those are tried first (``heads`` empty: none).
    for permute in (*(h for h in heads if blocks.outputs % (2 * h) == 0), None):
        candidate = blocks if permute is None else blocks.permuted(permute)
        made = candidate.dequantised()
        if made.shape == target.shape and np.array_equal(made.view(np.uint32), target):
            return candidate
    return None


def use_gguf_blocks(model: Any, gguf: Path, kernels: Kernels) -> int:
    """Swap ``model``'s decoder linear layers and head for :class:`BlockLinear` on ``gguf``.

    Every layer is swapped or none is: each one's blocks must make its float32 weight exactly.

    Returns:
        How many layers were swapped.

    Raises:
        GgufMatmulError: a layer's blocks do not make its weight, or the model is not laid out
            as a llama (``model.layers``, ``lm_head``) with float32 weights on cpu.
    """
    text = model.config.get_text_config()
    heads = (int(text.num_attention_heads), int(getattr(text, "num_key_value_heads", 0) or 0))
    swaps: list[tuple[Any, str, BlockLinear]] = []
    for tensor in _gguf_tensors(gguf):
        parts = tensor.name.split(".")
        if tensor.name == "token_embd.weight":
            owner, attribute = model, "lm_head"
        elif len(parts) == 4 and parts[0] == "blk" and parts[2] in _PROJECTIONS:
            path = f"model.layers.{parts[1]}.{_PROJECTIONS[parts[2]]}"
            owner_path, attribute = path.rsplit(".", 1)
            owner = model.get_submodule(owner_path)
        else:
            continue
        linear = getattr(owner, attribute, None)
        weight = getattr(linear, "weight", None)
        if not isinstance(weight, torch.nn.Parameter) or getattr(linear, "bias", None) is not None:
            raise GgufMatmulError(f"{tensor.name}: no bias-free linear layer to stand for")
        if weight.dtype != torch.float32 or weight.device.type != "cpu":
            raise GgufMatmulError(f"{tensor.name}: the weights are not float32 on cpu")
        permutes = tuple(h for h in heads if h) if parts[-2] in ("attn_q", "attn_k") else ()
        blocks = _matching(_read_blocks(tensor), weight, permutes)
        if blocks is None:
            raise GgufMatmulError(f"{tensor.name}: the blocks do not make the loaded weight")
        swaps.append((owner, attribute, BlockLinear(weight, blocks, kernels)))
    if not swaps:
        raise GgufMatmulError(f"{gguf.name} has no Q4_1 / Q8_0 layers of this model")
    for owner, attribute, layer in swaps:
        setattr(owner, attribute, layer)
    return len(swaps)
