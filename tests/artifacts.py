"""Where the tests' servers write their logs: ``test-artifacts/``, one file per pytest-xdist
worker (two workers may run the same fixture at once)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["ARTIFACTS", "artifact_path"]

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"


def artifact_path(stem: str, suffix: str = ".log") -> Path:
    """``test-artifacts/{stem}{suffix}``, with the xdist worker's id after ``stem`` in a worker."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    return ARTIFACTS / (f"{stem}-{worker}{suffix}" if worker else f"{stem}{suffix}")
