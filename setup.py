"""Builds the GGUF block kernel (app/engine/kernels/gguf.c) at install, once per instruction set.

Plain setuptools extensions: the kernel is C with no Python API (ctypes loads it), so it needs
neither torch nor Python's headers to build, and pip's isolated build environment (setuptools
alone) builds it. ``pip install -e .`` (``make install``) puts the libraries beside gguf.py;
gguf.py picks the best one this CPU runs, at run time. The rest of the project's metadata is in
pyproject.toml.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

KERNELS = Path("app", "engine", "kernels")


def _variants() -> Any:
    spec = importlib.util.spec_from_file_location("variants", KERNELS / "variants.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildKernels(build_ext):
    """build_ext with a temporary directory per extension: every build compiles the one
    gguf.c, whose object files must not overwrite each other's."""

    def build_extension(self, ext: Extension) -> None:
        shared = self.build_temp
        self.build_temp = os.path.join(shared, ext.name)
        try:
            super().build_extension(ext)
        finally:
            self.build_temp = shared


variants = _variants()
setup(
    ext_modules=[
        Extension(
            f"app.engine.kernels._gguf_{name}",
            sources=[str(KERNELS / "gguf.c")],
            depends=[str(KERNELS / "gguf.h")],
            extra_compile_args=[*variants.COMMON_FLAGS, *flags],
        )
        for name, _, flags in variants.built_on()
    ],
    cmdclass={"build_ext": BuildKernels},
)
