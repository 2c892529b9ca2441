"""Every build of the GGUF kernel this CPU runs, on tiny random llamas quantised with gguf-py
(head widths 32, 64 and 128; grouped-query attention; a Q4_1 and a Q8_0 layer each), against
torch's float32 forward of the same weights.

Exact where the kernel claims it: each weight is made bit for bit as gguf-py de-quantised it,
and a row's results never depend on its batch. Elsewhere within ``1e-5`` of the largest
reference value: the kernel's float32 sums run in another order than torch's (fma lanes, then
a tree), and its softmax's exponential is a polynomial within 2 ulp; measured here ~1e-6.
"""

from __future__ import annotations

import ctypes
import logging
import platform
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from app.engine.kernels import gguf
from app.engine.kernels.gguf import (
    MAX_KERNEL_ROWS,
    BlockLinear,
    GgufMatmulError,
    Kernels,
    c_layout,
    choice_reason,
    cpu_level,
    kernel_variants,
    layout_mismatches,
    library_path,
)
from app.engine.kernels.variants import VARIANTS, built_on
from tests.engine.kernels.tiny_llama import (
    BLOCK_TYPES,
    SHAPES,
    TinyLlama,
    decoded_logits,
    make_tiny_llama,
    reference_logits,
)

#: Float32 sums in another order than torch's (see the module's docstring): relative to the
#: largest reference value.
TOLERANCE = 1e-5
PROMPTS = [[1, 2, 3, 4, 5], list(range(10, 30)), [7]]  # 5 and 1 rows: the kernel's prefill too
STEPS = [8, 9, 10]


@pytest.fixture(scope="module")
def tinies(tmp_path_factory: pytest.TempPathFactory) -> list[TinyLlama]:
    directory = tmp_path_factory.mktemp("tiny-llamas")
    return [make_tiny_llama(shape, directory) for shape in SHAPES]


@pytest.fixture(scope="module")
def builds() -> dict[str, Kernels]:
    return {variant: Kernels.load(variant) for variant in kernel_variants()}


def test_every_build_this_cpu_can_run_is_installed_and_run_here() -> None:
    level = cpu_level()
    runnable = [name for name, needs, _ in built_on() if needs <= level]
    assert list(kernel_variants()) == runnable  # none left out: the tests below run them all
    assert kernel_variants()[-1] == "portable"  # built and tested on every machine
    assert Kernels.load().isa == runnable[0]


@pytest.mark.parametrize(
    ("variant", "level", "machine", "reason"),
    [
        ("avx512", 4, "x86_64", "this CPU runs x86-64-v4"),
        ("avx2", 3, "x86_64", "this CPU runs x86-64-v3"),
        ("portable", 0, "aarch64", "aarch64 is not x86-64: the kernel's vector paths are AVX2"),
        ("portable", 2, "x86_64", "x86-64-v2: neither AVX2 with FMA nor AVX-512"),
        ("portable", 4, "x86_64", "x86-64-v4 but no vector build is installed"),
    ],
)
def test_the_reason_given_for_the_build_chosen(
    variant: gguf.KernelVariant, level: int, machine: str, reason: str
) -> None:
    assert reason in choice_reason(variant, level, machine)


def test_arm_builds_the_portable_kernel_alone() -> None:
    assert [name for name, _, _ in built_on("aarch64")] == ["portable"]
    assert [name for name, _, _ in built_on("x86_64")] == [name for name, _, _ in VARIANTS]


def _installed_copy(directory: Path, variants: list[gguf.KernelVariant]) -> Path:
    for variant in variants:
        path = library_path(variant)
        assert path is not None
        shutil.copy(path, directory / path.name)
    return directory


def test_the_build_chosen_is_logged_once_with_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "all").mkdir()
    (tmp_path / "portable").mkdir()
    full = _installed_copy(tmp_path / "all", list(kernel_variants()))
    portable = _installed_copy(tmp_path / "portable", ["portable"])
    with caplog.at_level(logging.INFO, logger=gguf.__name__):
        for _ in range(2):
            Kernels.load(directory=full)
        assert Kernels.load(directory=portable).isa == "portable"
    best, level, machine = kernel_variants()[0], cpu_level(), platform.machine()
    assert [r.getMessage() for r in caplog.records] == [
        f"the GGUF kernel runs its {best} build: {choice_reason(best, level, machine)}",
        f"the GGUF kernel runs its portable build: {choice_reason('portable', level, machine)}",
    ]
    with pytest.raises(GgufMatmulError, match="avx2 build is not installed"):
        Kernels.load("avx2", directory=portable)
    with pytest.raises(GgufMatmulError, match="the GGUF kernel is not built"):
        Kernels.load(directory=tmp_path)


def test_every_builds_structs_are_the_ctypes_ones() -> None:
    for variant in kernel_variants():
        path = library_path(variant)
        assert path is not None
        library = ctypes.CDLL(str(path))
        assert layout_mismatches(library) == {}, variant
        layout = c_layout(library)
        assert len(layout) == 6 + 6 + 10 + 16  # each struct's size and each field's offset
        assert layout["slot"] == 5 * 8  # a Slot: five int64s in the tables passed in


def test_a_struct_that_moved_is_caught_at_load(tmp_path: Path) -> None:
    source = tmp_path / "moved.c"
    source.write_text(
        "#include <stdint.h>\n#include <stdio.h>\n"
        "int64_t kernel_layout(char *out, int64_t size) {\n"
        '    return snprintf(out, size, "slot=48 slot.keys=8 extra=1");\n}\n'
    )
    library = tmp_path / "moved.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    mismatches = layout_mismatches(ctypes.CDLL(str(library)))
    assert mismatches["slot"] == (48, 40)
    assert mismatches["slot.keys"] == (8, 0)
    assert mismatches["extra"] == (1, None)
    assert mismatches["decoder.layer"][0] is None
    with pytest.raises(GgufMatmulError, match="structs are not ctypes'"):
        Kernels.open(library)


def _blocks(model: torch.nn.Module) -> list[BlockLinear]:
    return [m for m in model.modules() if isinstance(m, BlockLinear)]


def test_each_build_makes_every_weight_exactly(
    tinies: list[TinyLlama], builds: dict[str, Kernels]
) -> None:
    for tiny in tinies:
        for variant, kernels in builds.items():
            assert set(tiny.shape.layers) == set(BLOCK_TYPES)
            for layer in _blocks(tiny.with_kernels(kernels)):
                eye = torch.eye(layer.in_features)
                with torch.inference_mode():
                    starts = range(0, layer.in_features, MAX_KERNEL_ROWS)
                    made = torch.cat([layer(eye[i : i + MAX_KERNEL_ROWS]) for i in starts])
                # + 0.0: -0.0 sums to 0.0
                assert torch.equal(made, layer.weight.T + 0.0), (tiny.shape.name, variant)


def test_each_builds_products_agree_with_torchs_at_every_row_count(
    tinies: list[TinyLlama], builds: dict[str, Kernels]
) -> None:
    generator = torch.Generator().manual_seed(2)
    for tiny in tinies:
        for variant, kernels in builds.items():
            for layer in _blocks(tiny.with_kernels(kernels)):
                x = torch.randn(MAX_KERNEL_ROWS, layer.in_features, generator=generator)
                with torch.inference_mode():
                    together = layer(x)
                    alone = torch.cat([layer(x[i : i + 1]) for i in range(MAX_KERNEL_ROWS)])
                assert torch.equal(together, alone), variant  # a row's sums are its own
                want = torch.nn.functional.linear(x, layer.weight)
                scale = float(want.abs().max())
                assert float((together - want).abs().max()) <= TOLERANCE * scale, variant


def test_each_builds_attention_agrees_with_sdpa_at_every_head_width(
    builds: dict[str, Kernels],
) -> None:
    generator = torch.Generator().manual_seed(3)
    for shape in SHAPES:
        group = shape.heads // shape.kv_heads
        query = 3 * torch.randn(1, shape.heads, 1, shape.head_dim, generator=generator)
        keys = torch.randn(1, shape.kv_heads, 37, shape.head_dim, generator=generator)
        values = torch.randn(1, shape.kv_heads, 37, shape.head_dim, generator=generator)
        want = torch.nn.functional.scaled_dot_product_attention(
            query, keys.repeat_interleave(group, 1), values.repeat_interleave(group, 1), scale=0.1
        ).transpose(1, 2)
        for variant, kernels in builds.items():
            got = kernels.attend(query, keys, values, 0.1)
            assert got is not None and got.shape == want.shape, (shape.name, variant)
            assert float((got - want).abs().max()) <= TOLERANCE * float(want.abs().max())


def test_each_builds_decoder_agrees_with_torchs_float32_forward(
    tinies: list[TinyLlama], builds: dict[str, Kernels]
) -> None:
    for tiny in tinies:
        references = [reference_logits(tiny, prompt, STEPS) for prompt in PROMPTS]
        for variant, kernels in builds.items():
            model = tiny.with_kernels(kernels)
            together = decoded_logits(model, kernels, PROMPTS, STEPS)
            for prompt, row, reference in zip(PROMPTS, together, references, strict=True):
                alone = decoded_logits(model, kernels, [prompt], STEPS)[0]
                assert all(torch.equal(a, b) for a, b in zip(alone, row, strict=True)), variant
                scale = max(float(logits.abs().max()) for logits in reference)
                for got, want in zip(row, reference, strict=True):
                    assert float((got - want).abs().max()) <= TOLERANCE * scale, (
                        tiny.shape.name,
                        variant,
                    )
                    assert int(got.argmax()) == int(want.argmax())
