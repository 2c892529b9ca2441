"""The embedded model's linear layers run from the GGUF's blocks: float32, a fifth of the bytes.

The embedded checkpoint is the GGUF de-quantised once: every float32 weight of a decoder linear
layer is exactly ``d * q + m`` of its Q4_1 block (32 weights, a 4-bit ``q`` each, ``d`` and ``m``
float16), and every weight of the tied embeddings / head exactly ``q * d`` of its Q8_0 block.
A decoding step on CPU is bound by the memory bandwidth of reading those float32 weights (about
540 MB a token); the blocks hold the same weights in about 110 MB. :class:`BlockLinear` computes
a layer's product from the blocks, with the very float32 weights (made in registers, in the
order numpy made them) and float32 accumulation: only the order of the sums differs from torch's
float32 matmul, as it differs between thread counts.

The kernel is C (``gguf.c``, its interface ``gguf.h``), built at install by setup.py once per
instruction set (:data:`variants.VARIANTS`: AVX-512, AVX2 with FMA, portable C); at run time
:meth:`Kernels.load` picks the best build this CPU runs, and says which and why in the log
(once). Without a build, or on inputs it does not take (more than :data:`MAX_KERNEL_ROWS` rows,
a prompt's prefill for one, another dtype or device), a layer runs torch's float32 matmul on
the weights it keeps. Every block is checked bit for bit against the loaded float32 weight
first, and every build's structs against the ctypes ones here (:func:`layout_mismatches`).

The same library computes one token's attention over a session's cache (:meth:`Kernels.attend`),
which the batcher uses for one-token steps: a call into torch's sdpa costs more than the work;
and a llama's whole one-token step for a batch of rows (:class:`Decoder`), which the batcher
runs instead of the modules: one call, which drops the GIL once.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.machinery
import logging
import os
import platform
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np
import torch

from app.engine.kernels.variants import COMMON_FLAGS, VARIANTS

__all__ = [
    "LIBRARY_DIR",
    "MAX_KERNEL_ROWS",
    "PROJECTIONS",
    "SOURCE",
    "BlockLinear",
    "Decoder",
    "Slot",
    "GgufMatmulError",
    "KernelVariant",
    "Kernels",
    "c_layout",
    "choice_reason",
    "compile_kernel",
    "cpu_level",
    "kernel_variants",
    "layout_mismatches",
    "library_path",
    "use_gguf_blocks",
]

log = logging.getLogger(__name__)

#: The most rows (sessions in one batched step) the kernel takes; more run torch's matmul,
#: which reads the float32 weights once for all of them.
MAX_KERNEL_ROWS = 8

_BLOCK = 32
_Q4_1, _Q8_0 = 3, 8  # ggml's type numbers

#: Where setup.py puts the builds (``_gguf_<variant>`` with Python's extension suffix).
LIBRARY_DIR = Path(__file__).resolve().parent
#: The kernel's C source (its header beside it).
SOURCE = LIBRARY_DIR / "gguf.c"

#: A row's cache for :meth:`Kernels.attend_rows`: the addresses of its keys' and values' buffers,
#: the tokens they hold, and each buffer's stride between heads (in floats).
Slot = tuple[int, int, int, int, int]

#: Which of the kernel's builds (:data:`variants.VARIANTS`), best first.
KernelVariant = Literal["avx512", "avx2", "portable"]
_LEVELS: dict[str, int] = {name: level for name, level, _ in VARIANTS}
_FLAGS: dict[str, tuple[str, ...]] = {name: flags for name, _, flags in VARIANTS}


class GgufMatmulError(Exception):
    """The blocks cannot stand for the loaded weights (no build, a mismatch, a layout)."""


def library_path(variant: KernelVariant, directory: Path | None = None) -> Path | None:
    """Where ``variant``'s build lies in ``directory`` (default :data:`LIBRARY_DIR`), or None
    when it was not built there."""
    return _library(variant, directory or LIBRARY_DIR)


def _library(variant: str, directory: Path) -> Path | None:
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = directory / f"_gguf_{variant}{suffix}"
        if path.is_file():
            return path
    return None


def cpu_level(directory: Path | None = None) -> int:
    """The x86-64 level this CPU runs (4: AVX-512, 3: AVX2 with FMA, 1 or 2: neither), as the
    portable build's compiler tells it (``__builtin_cpu_supports``); 0 on any other machine.

    Raises:
        GgufMatmulError: the portable build is not in ``directory`` (default
            :data:`LIBRARY_DIR`).
    """
    return _cpu_level(directory or LIBRARY_DIR)


@functools.cache
def _cpu_level(directory: Path) -> int:
    path = _library("portable", directory)
    if path is None:
        raise GgufMatmulError(
            f"the GGUF kernel is not built in {directory.name}/: run `make install` "
            "(pip install -e . builds it with a C compiler)"
        )
    level = ctypes.CDLL(str(path)).kernel_cpu_level
    level.restype = ctypes.c_int
    return int(level())


def kernel_variants(directory: Path | None = None) -> tuple[KernelVariant, ...]:
    """The builds in ``directory`` (default :data:`LIBRARY_DIR`) that this CPU runs, best
    first (the portable one always, where it is built).

    Raises:
        GgufMatmulError: the portable build is not in ``directory``.
    """
    directory = directory or LIBRARY_DIR
    level = cpu_level(directory)
    return tuple(
        cast(KernelVariant, name)
        for name, needs, _ in VARIANTS
        if (not needs or needs <= level) and _library(name, directory) is not None
    )


@functools.cache
def _chosen(directory: Path) -> KernelVariant:
    """The best build here, logged once with the reason."""
    variants = kernel_variants(directory)
    why = choice_reason(variants[0], cpu_level(directory), platform.machine())
    log.info("the GGUF kernel runs its %s build: %s", variants[0], why)
    return variants[0]


def choice_reason(variant: KernelVariant, level: int, machine: str) -> str:
    """Why ``variant`` is the best build on a ``machine`` of x86-64 ``level`` (0: not x86-64)."""
    if variant != "portable":
        return f"this CPU runs x86-64-v{level}"
    if level == 0:
        return f"{machine} is not x86-64: the kernel's vector paths are AVX2 / AVX-512 (no NEON)"
    if level >= 3:
        return f"this CPU runs x86-64-v{level} but no vector build is installed"
    return f"this CPU runs x86-64-v{level}: neither AVX2 with FMA nor AVX-512"


def compile_kernel(
    target: Path,
    *,
    variant: KernelVariant = "portable",
    flags: Sequence[str] = (),
    compiler: str | None = None,
) -> Path:
    """Compile ``gguf.c`` into the shared library ``target``, as setup.py builds ``variant``
    (plus ``flags``): for the sanitizer test and the benchmark, never at run time.

    Raises:
        GgufMatmulError: no C compiler, or it failed.
    """
    compiler = compiler or os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise GgufMatmulError("no C compiler (cc) to build the GGUF block kernel")
    command = [compiler, *COMMON_FLAGS, *_FLAGS[variant], *flags, "-shared", "-fPIC"]
    try:
        subprocess.run(
            [*command, "-o", str(target), str(SOURCE)], check=True, capture_output=True, timeout=300
        )
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", b"") or b""
        raise GgufMatmulError(
            f"building the GGUF block kernel failed: {exc} {detail.decode()[-500:]}"
        ) from exc
    return target


def c_layout(library: ctypes.CDLL) -> dict[str, int]:
    """What a build's ``kernel_layout()`` says: each struct's size and each field's offset."""
    layout = library.kernel_layout
    layout.argtypes = [ctypes.c_char_p, ctypes.c_int64]
    layout.restype = ctypes.c_int64
    size = int(layout(None, 0)) + 1
    text = ctypes.create_string_buffer(size)
    layout(text, size)
    return {k: int(v) for k, _, v in (p.partition("=") for p in text.value.decode().split())}


def _ctypes_layout() -> dict[str, int]:
    mirrors = {"slot": _Slot, "matrix": _Matrix, "block_layer": _Layer, "decoder": _Decoder}
    layout = {}
    for c_name, mirror in mirrors.items():
        layout[c_name] = ctypes.sizeof(mirror)
        for field, *_ in mirror._fields_:
            layout[f"{c_name}.{field}"] = getattr(mirror, field).offset
    return layout


def layout_mismatches(library: ctypes.CDLL) -> dict[str, tuple[int | None, int | None]]:
    """Each struct size or field offset on which ``library``'s C and the ctypes mirrors here
    disagree (or that one side lacks): ``{name: (C's, ctypes')}``; empty when they agree."""
    c, mirrored = c_layout(library), _ctypes_layout()
    return {
        name: (c.get(name), mirrored.get(name))
        for name in sorted(c.keys() | mirrored.keys())
        if c.get(name) != mirrored.get(name)
    }


class Kernels:
    """The compiled kernels (thread-safe: they hold no state; ctypes drops the GIL in them)."""

    def __init__(self, library: ctypes.CDLL) -> None:
        mismatches = layout_mismatches(library)
        if mismatches:
            raise GgufMatmulError(f"the GGUF kernel's structs are not ctypes': {mismatches}")
        pointer, size = ctypes.c_void_p, ctypes.c_int64
        self._q41 = library.q41_mm
        self._q41.argtypes = [pointer, size, size, pointer, pointer, pointer, size, pointer]
        self._q41.restype = None
        self._q80 = library.q80_mm
        self._q80.argtypes = [pointer, size, size, pointer, pointer, size, pointer]
        self._q80.restype = None
        self._attend = library.attend
        self._attend.argtypes = [pointer, size, pointer, pointer, size, size, size, size, size,
                                 ctypes.c_float, pointer]  # fmt: skip
        self._attend.restype = ctypes.c_int
        self._attend_rows = library.attend_rows
        self._attend_rows.argtypes = [size, pointer, pointer, pointer, size, size, size, pointer,
                                      ctypes.c_float, pointer]  # fmt: skip
        self._attend_rows.restype = ctypes.c_int
        self._decode_rows = library.decode_rows
        self._decode_rows.argtypes = [pointer, size, pointer, pointer, pointer]
        self._decode_rows.restype = ctypes.c_int
        isa = library.kernel_isa
        isa.restype = ctypes.c_char_p
        #: Which build this is: ``avx512``, ``avx2`` (with FMA) or ``portable`` (plain C, what
        #: compilers make of it for CPUs with neither).
        self.isa: str = isa().decode()

    @classmethod
    def load(
        cls, variant: KernelVariant | None = None, *, directory: Path | None = None
    ) -> Kernels:
        """Load a build of the kernels made at install.

        Args:
            variant: which build; None: the best this CPU runs (logged once, with why).
            directory: where the builds lie (default :data:`LIBRARY_DIR`).

        Raises:
            GgufMatmulError: the build is not there (the kernel was not built at install), or
                this CPU cannot run it.
        """
        directory = directory or LIBRARY_DIR
        chosen = _chosen(directory) if variant is None else variant
        path = _library(chosen, directory)
        if path is None:
            raise GgufMatmulError(f"the GGUF kernel's {chosen} build is not installed")
        if _LEVELS[chosen] > cpu_level(directory):
            raise GgufMatmulError(f"this CPU cannot run the GGUF kernel's {chosen} build")
        return cls.open(path)

    @classmethod
    def open(cls, path: Path) -> Kernels:
        """The kernels of the library at ``path`` (a build from :func:`compile_kernel`).

        Raises:
            GgufMatmulError: it is no build of this kernel, or its structs are not ctypes'.
        """
        try:
            library = ctypes.CDLL(str(path))
        except OSError as exc:
            raise GgufMatmulError(f"cannot load the GGUF kernel {path.name}: {exc}") from exc
        return cls(library)

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

    def attend_rows(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        slots: Sequence[Slot],
        scale: float,
    ) -> torch.Tensor | None:
        """A batch's one-token attention in one call: each row's new key and value written into
        its cache (at the slot's ``held``: the room is the caller's), then its query's attention
        over the ``held + 1`` tokens, as :meth:`attend` computes it; or None for inputs the
        kernel does not take (nothing is written then).

        Args:
            query: ``[rows, heads, 1, dim]``.
            key, value: the rows' new ones, ``[rows, kv_heads, 1, dim]``.
            slots: each row's cache, ``(keys, values, held, key head stride, value head
                stride)``: the addresses of ``[kv_heads, capacity, dim]`` float32 buffers, each
                head's rows contiguous.
            scale: the scores' factor.

        Returns:
            ``[rows, 1, heads, dim]``, the layout transformers' attention functions return.
        """
        rows, heads, tokens, dim = query.shape
        if (
            tokens != 1
            or key.shape[0] != rows
            or key.shape[2] != 1
            or len(slots) != rows
            or not _attention_takes(query, key, value)
        ):
            return None
        query, key, value = query.contiguous(), key.contiguous(), value.contiguous()
        table = np.array(slots, dtype=np.int64)
        out = torch.empty(rows, 1, heads, dim)
        failed = self._attend_rows(
            rows,
            query.data_ptr(),
            key.data_ptr(),
            value.data_ptr(),
            heads,
            key.shape[1],
            dim,
            table.ctypes.data,
            scale,
            out.data_ptr(),
        )
        return None if failed else out  # failed: no memory for the scores (nothing written)

    def attend(
        self, query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scale: float
    ) -> torch.Tensor | None:
        """One query token's attention over one row's keys and values, as sdpa computes it
        (within float error), or None for inputs the kernel does not take.

        Args:
            query: ``[1, heads, 1, dim]``.
            keys, values: ``[1, kv_heads, length, dim]``, each head's rows contiguous (a
                view of a longer cache is fine).
            scale: the scores' factor.

        Returns:
            ``[1, 1, heads, dim]``, the layout transformers' attention functions return.
        """
        # Checked in as few calls as may be: this runs for every layer of every row's step.
        rows, heads, tokens, dim = query.shape
        _, kv_heads, length, _ = keys.shape
        key_strides, value_strides = keys.stride(), values.stride()
        if (
            rows != 1
            or tokens != 1
            or keys.shape[0] != 1
            or not length
            or key_strides[2:] != (dim, 1)
            or value_strides[2:] != (dim, 1)
            or not _attention_takes(query, keys, values)
        ):
            return None
        if not query.is_contiguous():
            query = query.contiguous()
        out = torch.empty(1, 1, heads, dim)
        failed = self._attend(
            query.data_ptr(),
            heads,
            keys.data_ptr(),
            values.data_ptr(),
            kv_heads,
            length,
            key_strides[1],
            value_strides[1],
            dim,
            scale,
            out.data_ptr(),
        )
        return None if failed else out  # failed: no memory for the scores


class _Slot(ctypes.Structure):
    """C's ``slot``: what each row of a :data:`Slot` table (five int64s) stands for."""

    _fields_ = [
        ("keys", ctypes.c_void_p),
        ("values", ctypes.c_void_p),
        ("held", ctypes.c_int64),
        ("kstride", ctypes.c_int64),
        ("vstride", ctypes.c_int64),
    ]


class _Matrix(ctypes.Structure):
    _fields_ = [
        ("kind", ctypes.c_int64),
        ("outputs", ctypes.c_int64),
        ("qs", ctypes.c_void_p),
        ("d", ctypes.c_void_p),
        ("mn", ctypes.c_void_p),
    ]


#: The GGUF's names of a llama layer's projections, and transformers' paths to them.
PROJECTIONS = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


#: Each projection's field in C's ``block_layer`` (the layout check compares them by name).
_C_PROJECTIONS = dict(zip(PROJECTIONS, ("q", "k", "v", "o", "gate", "up", "down"), strict=True))


class _Layer(ctypes.Structure):
    _fields_ = [
        ("attn_norm", ctypes.c_void_p),
        ("mlp_norm", ctypes.c_void_p),
        *((name, _Matrix) for name in _C_PROJECTIONS.values()),
    ]


class _Decoder(ctypes.Structure):
    _fields_ = [
        *((name, ctypes.c_int64) for name in
          ("hidden", "heads", "kv_heads", "head_dim", "intermediate", "layers", "vocab")),
        ("eps", ctypes.c_float),
        ("scale", ctypes.c_float),
        ("attention_scaling", ctypes.c_float),
        ("embed", ctypes.c_void_p),
        ("norm", ctypes.c_void_p),
        ("inv_freq", ctypes.c_void_p),
        ("head", _Matrix),
        ("layer", ctypes.c_void_p),
    ]  # fmt: skip


class Decoder:
    """The embedded llama's one-token steps, a batch of rows in one call of the kernels.

    A step through transformers' modules is about a thousand calls into torch and the kernels,
    each of which drops the GIL and takes it back: while any other thread runs Python (a
    session's checks, the event loop), every one of them waits for that thread's switch
    interval, and the pass takes several times its work. Here the whole pass (see the C
    ``decode_rows``) drops the GIL once. Build it with :meth:`of`.
    """

    def __init__(self, kernels: Kernels, spec: _Decoder, layers: Any, kept: list[Any]) -> None:
        self._kernels = kernels
        self._spec = spec
        self._layers = layers  # the C array the spec points at
        self._kept = kept  # every tensor the spec points at
        #: The caches' layers it needs (one per decoder layer).
        self.layers = int(spec.layers)
        self.vocab = int(spec.vocab)
        #: One token's key (or value) in a cache layer, ``[1, kv_heads, 1, head_dim]``: the
        #: shape a layer's buffers grow by.
        self.template = torch.empty(1, int(spec.kv_heads), 1, int(spec.head_dim))

    @classmethod
    def of(cls, model: Any, kernels: Kernels) -> Decoder | None:
        """The decoder of ``model``: a llama (silu, no biases, default RoPE, full attention)
        whose linear layers and head all run from blocks (:func:`use_gguf_blocks`), float32 on
        cpu; None for any other model."""
        text = model.config.get_text_config()
        inner: Any = getattr(model, "model", None)
        rope = getattr(text, "rope_parameters", None) or getattr(text, "rope_scaling", None) or {}
        rotary: Any = getattr(inner, "rotary_emb", None)
        if (
            text.model_type != "llama"
            or inner is None
            or getattr(text, "hidden_act", None) != "silu"
            or getattr(text, "attention_bias", False)
            or getattr(text, "mlp_bias", False)
            or rope.get("rope_type", "default") != "default"
            or getattr(text, "sliding_window", None) is not None
            or any(kind != "full_attention" for kind in getattr(text, "layer_types", None) or ())
            or not isinstance(getattr(rotary, "inv_freq", None), torch.Tensor)
            or not isinstance(getattr(model, "lm_head", None), BlockLinear)
            or model.lm_head._blocks.kind != _Q8_0
        ):
            return None
        hidden = int(text.hidden_size)
        heads, kv_heads = int(text.num_attention_heads), int(text.num_key_value_heads)
        head_dim = int(getattr(text, "head_dim", None) or hidden // heads)
        if not 0 < head_dim <= 256 or head_dim % 16 or heads % kv_heads:
            return None  # what the attention kernel takes (as :func:`_attention_takes`)
        kept: list[Any] = []

        def floats(tensor: torch.Tensor, size: int) -> int | None:
            if tensor.dtype != torch.float32 or not tensor.is_cpu or tensor.numel() != size:
                return None
            tensor = tensor.detach().contiguous()
            kept.append(tensor)
            return int(tensor.data_ptr())

        def matrix(linear: Any, inputs: int) -> _Matrix | None:
            if not isinstance(linear, BlockLinear) or linear.in_features != inputs:
                return None
            blocks = linear._blocks
            kept.append(blocks)
            mins = 0 if blocks.mins is None else blocks.mins.data_ptr()
            return _Matrix(blocks.kind, blocks.outputs, blocks.quants.data_ptr(),
                           blocks.scales.data_ptr(), mins)  # fmt: skip

        layers = (_Layer * len(inner.layers))()
        inter = int(text.intermediate_size)
        widths = {"attn_q": hidden, "attn_k": hidden, "attn_v": hidden,
                  "attn_output": heads * head_dim, "ffn_gate": hidden, "ffn_up": hidden,
                  "ffn_down": inter}  # fmt: skip
        outputs = {"attn_q": heads * head_dim, "attn_k": kv_heads * head_dim,
                   "attn_v": kv_heads * head_dim, "attn_output": hidden, "ffn_gate": inter,
                   "ffn_up": inter, "ffn_down": hidden}  # fmt: skip
        for index, layer in enumerate(inner.layers):
            attn_norm = floats(layer.input_layernorm.weight, hidden)
            mlp_norm = floats(layer.post_attention_layernorm.weight, hidden)
            if attn_norm is None or mlp_norm is None:
                return None
            layers[index].attn_norm, layers[index].mlp_norm = attn_norm, mlp_norm
            for name, path in PROJECTIONS.items():
                made = matrix(layer.get_submodule(path), widths[name])
                if made is None or made.outputs != outputs[name]:
                    return None
                setattr(layers[index], _C_PROJECTIONS[name], made)
        head = matrix(model.lm_head, hidden)
        vocab = int(model.lm_head.out_features)
        embed = floats(inner.embed_tokens.weight, vocab * hidden)
        norm = floats(inner.norm.weight, hidden)
        inv_freq = floats(rotary.inv_freq, head_dim // 2)
        if head is None or embed is None or norm is None or inv_freq is None:
            return None
        spec = _Decoder(
            hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
            intermediate=inter, layers=len(inner.layers), vocab=vocab,
            eps=float(text.rms_norm_eps), scale=float(inner.layers[0].self_attn.scaling),
            attention_scaling=float(getattr(rotary, "attention_scaling", 1.0)), embed=embed,
            norm=norm, inv_freq=inv_freq, head=head, layer=ctypes.addressof(layers),
        )  # fmt: skip
        return cls(kernels, spec, layers, kept)

    def decode(
        self, token_ids: Sequence[int], slots: Sequence[Sequence[Slot]]
    ) -> torch.Tensor | None:
        """One step of each row: its token fed through every layer, its keys and values
        written into its caches where the slots say, and its next token's logits.

        Args:
            token_ids: each row's token.
            slots: each row's caches, one slot a decoder layer (:meth:`GrowingLayer.slot`),
                the room for one more token the caller's.

        Returns:
            ``[rows, vocab]`` float32 logits, or None when the scores found no memory
            (nothing is counted then: the caller advances no cache).
        """
        rows = len(token_ids)
        ids = np.array(token_ids, dtype=np.int64)
        table = np.array(slots, dtype=np.int64)
        if table.shape != (rows, self.layers, 5) or ((ids < 0) | (ids >= self.vocab)).any():
            raise ValueError("a row's token or slots do not fit the decoder")
        logits = torch.empty(rows, self.vocab)
        failed = self._kernels._decode_rows(
            ctypes.byref(self._spec), rows, ids.ctypes.data, table.ctypes.data, logits.data_ptr()
        )
        return None if failed else logits


def _attention_takes(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> bool:
    """What both attention kernels need: float32 on cpu, keys and values of one shape, the
    query's width (at most 256, in 16s), and a whole number of query heads per key head."""
    heads, dim = query.shape[1], query.shape[3]
    return bool(
        keys.shape == values.shape
        and keys.shape[3] == dim
        and 0 < dim <= 256
        and not dim % 16
        and not heads % keys.shape[1]
        and query.is_cpu
        and keys.is_cpu
        and values.is_cpu
        and query.dtype == keys.dtype == values.dtype == torch.float32
    )


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
        elif len(parts) == 4 and parts[0] == "blk" and parts[2] in PROJECTIONS:
            path = f"model.layers.{parts[1]}.{PROJECTIONS[parts[2]]}"
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
