"""Serving stacks: named, pinned releases (vLLM 0.32.0, 0.34.0, ...), each run by its own code.

A stack is a configuration line (``MASKSCOPE_STACKS``, :mod:`app.engine.stack_pins`); its code
runs in one warm runner per stack (``vllm_runner.py`` in the stack's environment, shared over a
unix socket by the server and every CLI call of the user). ``maskscope`` is the in-process
stack: Maskscope's own xgrammar, the playground's default. What a stack's versions are is read in
its own process; a stack whose environment is missing, or whose code no longer imports (an entry
point moved in a new release), is listed unavailable with the reason, never run with another
release's code.
"""

from __future__ import annotations

import importlib.metadata
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from app.engine.stack_pins import MAKE_STACKS, MASKSCOPE, Stack, configured
from app.exceptions import InvalidInput, MaskscopeError
from app.settings import Settings

if TYPE_CHECKING:
    from app.engine.grammars.tools.vllm_builder import VllmBuilder

__all__ = [
    "MAKE_STACKS",
    "MASKSCOPE",
    "Stack",
    "StackInfo",
    "close_runners",
    "configured",
    "runner",
    "stack_infos",
]

_VERSIONS = ("vllm", "xgrammar", "llguidance", "transformers")


@dataclass(frozen=True, slots=True)
class StackInfo:
    """One stack as ``GET /api/stacks`` lists it.

    Attributes:
        id: its name.
        versions: vllm (a vLLM stack's), xgrammar, llguidance, transformers, read in the
            stack's own process.
        forward: whether it can serve a model here (a layered release builds and masks only).
        available: whether its code runs.
        reason: why not, when it does not (the import error, or what is not installed).
    """

    id: str
    versions: dict[str, str] = field(default_factory=dict)
    forward: bool = False
    available: bool = True
    reason: str | None = None


_RUNNERS: dict[tuple[object, ...], VllmBuilder] = {}
_LOCK = threading.Lock()


def _key(settings: Settings, stack: Stack) -> tuple[object, ...]:
    return (
        stack,
        settings.cache_dir,
        settings.stack_runner_dir,
        settings.vllm_runner_memory_mb,
        settings.vllm_timeout_s,
        settings.stack_runner_idle_s,
    )


def runner(settings: Settings, name: str) -> VllmBuilder:
    """The builder that runs stack ``name``'s own code (one per stack and settings, kept).

    Raises:
        InvalidInput: no such stack (``/stack``), or ``maskscope`` (it runs in-process).
    """
    from app.engine.grammars.tools.vllm_builder import VllmBuilder

    stacks = configured(settings)
    if name not in stacks:
        known = ", ".join([MASKSCOPE, *stacks])
        raise InvalidInput(f"unknown stack {name!r}: one of {known}", pointer="/stack")
    stack = stacks[name]
    with _LOCK:
        found = _RUNNERS.get(_key(settings, stack))
        if found is None:
            found = _RUNNERS[_key(settings, stack)] = VllmBuilder(settings, stack)
    return found


def close_runners() -> None:
    """Close every builder :func:`runner` made (each kills the runner it started)."""
    with _LOCK:
        builders = list(_RUNNERS.values())
        _RUNNERS.clear()
    for builder in builders:
        builder.close()


def _maskscope() -> StackInfo:
    versions = {}
    for name in _VERSIONS[1:]:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = ""
    return StackInfo(MASKSCOPE, versions, forward=True)


def _info(settings: Settings, stack: Stack) -> StackInfo:
    builder = runner(settings, stack.name)
    forward = not stack.layered and (stack.python.parent / "vllm").is_file()
    try:
        versions = builder.versions()
    except MaskscopeError as error:
        return StackInfo(stack.name, forward=False, available=False, reason=_reason(error))
    return StackInfo(stack.name, {k: versions.get(k, "") for k in _VERSIONS}, forward)


def _reason(error: MaskscopeError) -> str:
    """The line that says why: an import error's own line when the runner died of one."""
    lines = error.message.splitlines()
    for line in reversed(lines):
        if "Error:" in line or "Error(" in line:
            return f"{lines[0].split(':')[0]}: {line.strip()}"
    return error.message


def stack_infos(settings: Settings) -> list[StackInfo]:
    """Every stack: ``maskscope``, then ``settings.stacks`` in order, each read in its own
    process (their runners start at once, side by side, when none runs).

    Raises:
        InvalidInput: ``MASKSCOPE_STACKS`` does not parse.
    """
    stacks = list(configured(settings).values())
    with ThreadPoolExecutor(max_workers=max(1, len(stacks))) as pool:
        infos = list(pool.map(lambda s: _info(settings, s), stacks))
    return [_maskscope(), *infos]
