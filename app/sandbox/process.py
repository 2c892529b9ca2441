"""Start the sandbox process with its limits, an empty environment and a temporary directory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from app.exceptions import PydanticFailed

__all__ = ["Limits", "run_child"]


@dataclass(frozen=True)
class Limits:
    """What one sandbox run may use."""

    cpu_s: int = 5
    memory_bytes: int = 1024 * 1024 * 1024
    output_bytes: int = 4 * 1024 * 1024
    wall_s: float = 15.0


def _failure(returncode: int, stderr: str, limits: Limits) -> PydanticFailed:
    if returncode in (-signal.SIGXFSZ, 128 + signal.SIGXFSZ) or "File too large" in stderr:
        return PydanticFailed(f"the schema is larger than the {limits.output_bytes} bytes allowed")
    if returncode in (-signal.SIGXCPU, -signal.SIGKILL, 128 + signal.SIGXCPU):
        return PydanticFailed(f"the source used more than {limits.cpu_s} s of CPU time")
    if "MemoryError" in stderr:
        return PydanticFailed(f"the source needed more than {limits.memory_bytes} bytes of memory")
    last = stderr.strip().splitlines()[-1:] or [f"exit status {returncode}"]
    return PydanticFailed(f"the sandbox process failed: {last[0]}")


def run_child(request: dict[str, Any], limits: Limits) -> dict[str, Any]:
    """Run one request in a fresh ``python -I -B`` process and return its JSON answer.

    The process gets an empty environment, no inherited file descriptors but its stdin and two
    files in a temporary directory (its working directory, removed afterwards), and is killed
    with its whole process group when it runs past the wall-clock limit.

    Raises:
        PydanticFailed: the process ran out of time, memory or output size, or crashed.
    """
    command = [sys.executable, "-I", "-B", "-m", "app.sandbox.runner", json.dumps(asdict(limits))]
    with tempfile.TemporaryDirectory(prefix="maskscope-sandbox-") as tmp:
        out_path, err_path = Path(tmp) / "answer.json", Path(tmp) / "stderr.txt"
        with out_path.open("wb") as out, err_path.open("wb") as err:
            process = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=out, stderr=err, cwd=tmp, env={},
                close_fds=True, start_new_session=True,
            )  # fmt: skip
            try:
                process.communicate(json.dumps(request).encode(), timeout=limits.wall_s)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                raise PydanticFailed(
                    f"the source ran longer than the {limits.wall_s:g} s allowed"
                ) from None
        stderr = err_path.read_text(errors="replace")[-4000:]
        if process.returncode != 0:
            raise _failure(process.returncode, stderr, limits)
        try:
            answer: dict[str, Any] = json.loads(out_path.read_bytes())
        except ValueError:
            raise PydanticFailed("the sandbox process gave no answer") from None
    return answer
