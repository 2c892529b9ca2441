"""Checked cases kept on disk, keyed by the source (its name and content) × stack × engine ×
options (and the libraries' versions, a serving stack's as its own process reads them): an
unchanged file costs nothing on the next run, and a stack upgraded in place is checked again."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import json
import os
import tempfile
from pathlib import Path

from app.suite.discovery import Source
from app.suite.records import Case, CheckOptions

__all__ = ["CACHE_VERSION", "Cache", "case_key"]

CACHE_VERSION = 1
_LIBRARIES = ("xgrammar", "llguidance", "maskscope")


def _versions() -> dict[str, str]:
    out = {}
    for name in _LIBRARIES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = ""
    return out


def case_key(
    source: Source,
    stack: str,
    engine: str,
    options: CheckOptions,
    stack_versions: dict[str, str] | None = None,
) -> str:
    """The cache key of one case: a SHA-256 over everything its answer depends on.

    Args:
        source: the source.
        stack: the stack's name.
        engine: the masking library.
        options: the run's options.
        stack_versions: what the stack's own process imports (vllm, xgrammar, llguidance,
            transformers); a request's deriving stack's under ``maskscope``.
    """
    parts = {
        "version": CACHE_VERSION, "name": source.name, "kind": source.kind, "text": source.text,
        "tests": source.tests, "stack": stack, "engine": engine, "options": options.key(),
        "libraries": _versions(), "stack_versions": stack_versions or {},
    }  # fmt: skip
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


class Cache:
    """A directory of cases, one JSON file each (``KEY[:2]/KEY.json``).

    Args:
        root: the directory (made on the first write).
    """

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> Case | None:
        """The case kept under ``key`` (marked ``cached``), or None."""
        try:
            data = json.loads(self._path(key).read_text(encoding="utf-8"))
            return dataclasses.replace(Case.from_dict(data), cached=True)
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def put(self, key: str, case: Case) -> None:
        """Keep ``case`` (written whole, then renamed: a reader never sees half a file)."""
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(case.to_dict(), out)
        os.replace(temporary, path)
