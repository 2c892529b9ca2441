"""vLLM 0.32.0's own code as a test oracle: a Python program run by ``.venv-vllm``'s interpreter.

The program reads JSON on stdin and prints one JSON answer as its last line (vLLM logs above it).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

__all__ = ["VLLM_PYTHON", "run_vllm"]

ROOT = Path(__file__).resolve().parent.parent
#: The interpreter of vLLM's virtualenv: ``MASKSCOPE_TEST_VLLM_PYTHON``, else ``.venv-vllm``.
VLLM_PYTHON = Path(
    os.environ.get("MASKSCOPE_TEST_VLLM_PYTHON") or ROOT / ".venv-vllm" / "bin" / "python"
)


def run_vllm(program: str, data: Any) -> Any:
    """Run ``program`` in vLLM's virtualenv, ``data`` as JSON on stdin; its last line, parsed."""
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "ERROR", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("PYTHONPATH", None)
    done = subprocess.run(
        [str(VLLM_PYTHON), "-I", "-c", program],
        input=json.dumps(data),
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
