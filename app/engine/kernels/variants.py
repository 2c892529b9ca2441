"""The GGUF kernel's builds, one per instruction set: what setup.py compiles at install.

No import of ``app`` here (only the standard library): setup.py reads this file by its path in
pip's build environment, where neither the project nor torch is installed.
"""

from __future__ import annotations

import platform

__all__ = ["COMMON_FLAGS", "VARIANTS", "Variant", "built_on"]

#: Every build's flags. ``-ffp-contract=off``: the weights are made as numpy made them (a product
#: then a sum, never fused), which is what makes them bit for bit the loaded float32 weights.
COMMON_FLAGS = ("-O3", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror")

#: (name, the x86-64 level a CPU needs to run it (0: any CPU), its own flags), best first. The
#: levels are the psABI's: v4 holds AVX-512 F/BW/CD/DQ/VL, v3 AVX2 with FMA.
Variant = tuple[str, int, tuple[str, ...]]
VARIANTS: tuple[Variant, ...] = (
    ("avx512", 4, ("-march=x86-64-v4",)),
    ("avx2", 3, ("-march=x86-64-v3",)),
    ("portable", 0, ()),
)

_X86 = ("x86_64", "amd64", "x64")


def built_on(machine: str | None = None) -> tuple[Variant, ...]:
    """The builds a compiler for ``machine`` (default: this one) makes: all three on x86-64,
    the portable one alone anywhere else (its vector paths are x86's)."""
    name = (machine or platform.machine()).lower()
    return VARIANTS if name in _X86 else tuple(v for v in VARIANTS if not v[1])
