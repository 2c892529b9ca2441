"""vLLM 0.32.0's own code as a test oracle: a Python program run by ``.venv-vllm``'s interpreter.

The program reads JSON on stdin and prints one JSON answer as its last line (vLLM logs above it).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

__all__ = ["STACK_PATHS", "VLLM_PYTHON", "run_vllm"]

ROOT = Path(__file__).resolve().parent.parent
#: The interpreter of vLLM's virtualenv: ``MASKSCOPE_TEST_VLLM_PYTHON``, else ``.venv-vllm``.
VLLM_PYTHON = Path(
    os.environ.get("MASKSCOPE_TEST_VLLM_PYTHON") or ROOT / ".venv-vllm" / "bin" / "python"
)
#: What each shipped stack puts first on that interpreter's path (``make stacks``): 0.32.0 is
#: the virtualenv itself, 0.34.0 its wheel installed --no-deps into ``.stacks/vllm-0.34.0``.
STACK_PATHS: dict[str, tuple[Path, ...]] = {
    "vllm-0.32.0": (),
    "vllm-0.34.0": (ROOT / ".stacks" / "vllm-0.34.0",),
}


def run_vllm(program: str, data: Any, *, stack: str = "vllm-0.32.0") -> Any:
    """Run ``program`` in vLLM's virtualenv under ``stack`` (its directories first on the
    path), ``data`` as JSON on stdin; its last line, parsed."""
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "ERROR", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("PYTHONPATH", None)
    paths = [str(path) for path in STACK_PATHS[stack]]
    done = subprocess.run(
        [str(VLLM_PYTHON), "-I", "-c", f"import sys; sys.path[:0] = {paths!r}\n{program}"],
        input=json.dumps(data),
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
