"""A suite's settings: ``maskscope.toml`` (top-level keys) or ``[tool.maskscope]`` in
``pyproject.toml``, in the working directory; the command line's flags win over both.

Keys: ``paths``, ``stacks``, ``engines``, ``fail-on``, ``preset``, ``options`` (compile options
over the preset: ``any_whitespace``, ``strict_mode``, ``indent``, ``separators``,
``max_whitespace_cnt``), ``model``, ``seed``, ``budget-ms``, ``slow-compile-ms``, ``baseline``,
``cache-dir``, ``jobs``.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.exceptions import InvalidInput
from app.suite.records import Level

__all__ = ["DEFAULT_FAIL_ON", "SuiteConfig", "find_config", "load_config", "read_config"]

#: What fails a run unless told otherwise: everything but over-restrictions and slow compiles.
DEFAULT_FAIL_ON = (
    Level.COMPILE_ERROR, Level.IGNORED, Level.WEAKENED, Level.UNCONSTRAINED, Level.TEST_FAILED,
)  # fmt: skip
_OPTIONS = {"any_whitespace", "strict_mode", "indent", "separators", "max_whitespace_cnt"}


@dataclass(frozen=True)
class SuiteConfig:
    """A suite's settings (each None or empty: the command line's default).

    Attributes:
        file: where they were read from (None: no file).
    """

    file: Path | None = None
    paths: tuple[str, ...] = ()
    stacks: tuple[str, ...] = ()
    engines: tuple[str, ...] = ()
    fail_on: tuple[Level, ...] = ()
    preset: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    model: str | None = None
    seed: int | None = None
    budget_ms: int | None = None
    slow_compile_ms: float | None = None
    baseline: str | None = None
    cache_dir: str | None = None
    jobs: int | None = None


def find_config(folder: Path) -> tuple[Path, dict[str, Any]] | None:
    """The settings table of ``folder``: its ``maskscope.toml``, else ``[tool.maskscope]`` of
    its ``pyproject.toml``; None when neither has one."""
    own = folder / "maskscope.toml"
    if own.is_file():
        return own, _toml(own)
    project = folder / "pyproject.toml"
    if project.is_file():
        table = _toml(project).get("tool", {}).get("maskscope")
        if isinstance(table, dict):
            return project, table
    return None


def read_config(path: Path) -> SuiteConfig:
    """The settings of a named file: a ``pyproject.toml``'s ``[tool.maskscope]`` (none: the
    defaults), any other file's top-level keys.

    Raises:
        InvalidInput: the file is missing, not TOML, or its settings do not validate.
    """
    if not path.is_file():
        raise InvalidInput(f"--config {path}: no such file")
    table = _toml(path)
    if path.name == "pyproject.toml":
        table = table.get("tool", {}).get("maskscope", {})
    return load_config(path, table)


def _toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as error:
        raise InvalidInput(f"{path}: not TOML: {error}") from None


def _strings(path: Path, key: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidInput(f"{path}: {key} is a list of strings")
    return tuple(value)


def _levels(path: Path, value: Any) -> tuple[Level, ...]:
    names = _strings(path, "fail-on", value)
    unknown = [n for n in names if n not in Level.__members__.values()]
    if unknown:
        known = ", ".join(level.value for level in Level)
        raise InvalidInput(f"{path}: fail-on: unknown level {unknown[0]!r} (one of {known})")
    return tuple(Level(n) for n in names)


def _scalar(path: Path, key: str, value: Any, kind: type | tuple[type, ...]) -> Any:
    if isinstance(value, bool) or not isinstance(value, kind):
        raise InvalidInput(f"{path}: {key} has the wrong type ({type(value).__name__})")
    return value


def load_config(path: Path, table: dict[str, Any]) -> SuiteConfig:
    """The settings of ``table`` (read from ``path``).

    Raises:
        InvalidInput: an unknown key or a value of the wrong type, naming the file and key.
    """
    out: dict[str, Any] = {"file": path}
    for key, value in table.items():
        name = key.replace("-", "_")
        if name in ("paths", "stacks", "engines"):
            out[name] = _strings(path, key, value)
        elif name == "fail_on":
            out[name] = _levels(path, value)
        elif name in ("preset", "model", "baseline", "cache_dir"):
            out[name] = _scalar(path, key, value, str)
        elif name in ("seed", "budget_ms", "jobs"):
            out[name] = _scalar(path, key, value, int)
        elif name == "slow_compile_ms":
            out[name] = float(_scalar(path, key, value, (int, float)))
        elif name == "options" and isinstance(value, dict) and set(value) <= _OPTIONS:
            out[name] = dict(value)
        elif name == "options":
            raise InvalidInput(f"{path}: options takes {', '.join(sorted(_OPTIONS))}")
        else:
            raise InvalidInput(f"{path}: unknown key {key!r}")
    return SuiteConfig(**out)
