"""Fixtures of the docs site's tests: the hook module, and the site built once."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent


def load_hooks() -> ModuleType:
    """The mkdocs hooks of the site (docs/hooks/maskscope.py), imported from their file."""
    spec = importlib.util.spec_from_file_location(
        "maskscope_docs_hooks", ROOT / "docs" / "hooks" / "maskscope.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict`` of one configuration into ``site``, with this interpreter."""
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=300,
    )


@pytest.fixture(scope="session")
def hooks() -> ModuleType:
    """The site's hook module."""
    return load_hooks()


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site as ``make docs`` builds it (strict), in a temporary directory."""
    out = tmp_path_factory.mktemp("site") / "site"
    built = mkdocs_build(ROOT / "mkdocs.yml", out)
    assert built.returncode == 0, built.stdout + built.stderr
    return out
