"""The GGUF kernel built with AddressSanitizer and UndefinedBehaviorSanitizer, every build this
CPU runs: the kernels' core calls on the tiny llamas (``tiny_llama.py``'s script) in a Python
that preloads the compiler's ASan runtime, and no sanitizer report."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.engine.kernels.gguf import compile_kernel, kernel_variants

ROOT = Path(__file__).resolve().parents[3]
SANITIZE = (
    "-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined",
    "-fno-sanitize-recover=all",
)  # fmt: skip
REPORTS = ("ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer")

# A product that reads one output's blocks past the end of its quants: the control that shows
# a sanitized build reports what it should.
OVERRUN = """
import ctypes, sys
import numpy as np
lib = ctypes.CDLL(sys.argv[1])
p, n = ctypes.c_void_p, ctypes.c_int64
lib.q80_mm.argtypes = [p, n, n, p, p, n, p]
x, qs = np.ones(32, np.float32), np.zeros(64 * 32, np.int8)
d, y = np.ones(65, np.float32), np.zeros(65, np.float32)
lib.q80_mm(x.ctypes.data, 1, 32, qs.ctypes.data, d.ctypes.data, 65, y.ctypes.data)
"""


@pytest.fixture(scope="module")
def sanitized(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    directory = tmp_path_factory.mktemp("sanitized")
    return [
        compile_kernel(directory / f"gguf-{variant}.so", variant=variant, flags=SANITIZE)
        for variant in kernel_variants()
    ]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    runtime = subprocess.run(
        ["cc", "-print-file-name=libasan.so"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert Path(runtime).is_file(), "the compiler has no ASan runtime"
    env = {
        **os.environ,
        # Python itself is not instrumented: the runtime must come first, and its own leaks
        # (interned objects, torch's pools) are not the kernel's.
        "LD_PRELOAD": runtime,
        "ASAN_OPTIONS": "detect_leaks=0",
        "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
    }
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )


def test_the_kernels_core_calls_raise_no_sanitizer_report(sanitized: list[Path]) -> None:
    done = _run("-m", "tests.engine.kernels.tiny_llama", *map(str, sanitized))
    assert done.returncode == 0, done.stderr[-3000:]
    assert not [r for r in REPORTS if r in done.stderr], done.stderr[-3000:]
    assert done.stdout.splitlines() == [f"{variant}: ok" for variant in kernel_variants()] + ["ok"]


def test_a_sanitized_build_reports_a_read_past_its_blocks(sanitized: list[Path]) -> None:
    done = _run("-c", OVERRUN, str(sanitized[-1]))
    assert done.returncode != 0
    assert "ERROR: AddressSanitizer: heap-buffer-overflow" in done.stderr
    assert "in q80_mm" in done.stderr and "gguf.c" in done.stderr
