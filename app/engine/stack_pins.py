"""A stack's configuration line (``MASKSCOPE_STACKS``) and where its environment is.

One line per release::

    vllm-0.32.0=vllm_python                      the environment MASKSCOPE_VLLM_PYTHON names
    vllm-0.33.0=python:/opt/vllm-0.33/bin/python an environment of its own
    vllm-0.34.0=vllm==0.34.0 over vllm-0.32.0    pins installed --no-deps into
                                                 MASKSCOPE_STACKS_DIR/vllm-0.34.0, layered over
                                                 vllm-0.32.0's environment (first on its path)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.exceptions import InvalidInput
from app.settings import Settings

__all__ = [
    "MAKE_STACKS",
    "MARKER",
    "MASKSCOPE",
    "NAME_PATTERN",
    "ServeFlags",
    "Stack",
    "configured",
    "parse_line",
]

#: The in-process stack: Maskscope's own xgrammar, the playground's default.
MASKSCOPE = "maskscope"
#: The file ``make stacks`` writes in a layered stack's directory once its pins are installed.
MARKER = ".installed"
MAKE_STACKS = "make stacks"
#: A stack's name: a plain id.
NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"
_NAME = re.compile(NAME_PATTERN)
_PIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\[\],-]*(==|>=|<=|~=|<|>)[A-Za-z0-9.*+!_-]+")


@dataclass(frozen=True, slots=True)
class Stack:
    """A named, pinned serving release and the environment that runs it.

    Attributes:
        name: its id (``vllm-0.34.0``).
        python: the interpreter its runner is started with.
        paths: directories put first on that interpreter's path (a layered stack's target).
        pins: the requirements installed into ``paths[0]`` (empty: an environment of its own).
        over: the stack whose environment a layered stack runs on.
        line: its configuration line.
    """

    name: str
    python: Path
    paths: tuple[Path, ...] = ()
    pins: tuple[str, ...] = ()
    over: str | None = None
    line: str = ""

    @property
    def layered(self) -> bool:
        """Whether the release is a wheel installed over another stack's environment."""
        return bool(self.pins)

    def missing(self) -> str | None:
        """What of its environment is not there (None: all of it), in words."""
        if not self.python.is_file():
            return f"{self.python.parent.parent.name}/bin/{self.python.name} is missing"
        for path in self.paths:
            if self.pins and not (path / MARKER).is_file():
                return f"{path.name} is not installed ({' '.join(self.pins)})"
        return None


def parse_line(line: str, index: int = 0) -> tuple[str, str]:
    """``NAME=SPEC`` split, checked.

    Raises:
        InvalidInput: no ``=``, or a name that is not a plain id (its index in the pointer).
    """
    name, sep, spec = line.partition("=")
    name, spec = name.strip(), spec.strip()
    if not sep or not _NAME.fullmatch(name) or not spec or name == MASKSCOPE:
        raise InvalidInput(
            f"MASKSCOPE_STACKS[{index}] is {line!r}: write NAME=vllm_python, NAME=python:PATH "
            f"or NAME=PIN... over BASE (NAME a plain id, not {MASKSCOPE!r})",
            pointer=f"/stacks/{index}",
        )
    return name, spec


def configured(settings: Settings) -> dict[str, Stack]:
    """Every stack ``settings.stacks`` lists, by name, in its order.

    Raises:
        InvalidInput: a line that does not parse, a duplicate name, a pin that is not
            ``name==version``-like, or a base that is not an earlier environment of its own.
    """
    found: dict[str, Stack] = {}
    for index, line in enumerate(settings.stacks):
        name, spec = parse_line(line, index)
        pointer = f"/stacks/{index}"
        if name in found:
            raise InvalidInput(f"MASKSCOPE_STACKS names {name!r} twice", pointer=pointer)
        if spec == "vllm_python":
            found[name] = Stack(name, settings.vllm_python, line=line)
        elif spec.startswith("python:"):
            found[name] = Stack(name, Path(spec.removeprefix("python:")).expanduser(), line=line)
        else:
            found[name] = _layered(settings, name, spec, found, pointer, line)
    return found


def _layered(
    settings: Settings, name: str, spec: str, found: dict[str, Stack], pointer: str, line: str
) -> Stack:
    pins_text, sep, base = spec.rpartition(" over ")
    pins = tuple(pins_text.split())
    base = base.strip()
    if not sep or not pins:
        raise InvalidInput(
            f"MASKSCOPE_STACKS: {name!r} is {spec!r}: write PIN [PIN...] over BASE",
            pointer=pointer,
        )
    bad = [pin for pin in pins if not _PIN.fullmatch(pin)]
    if bad:
        raise InvalidInput(
            f"MASKSCOPE_STACKS: {name!r} has {bad[0]!r}, not a pin (write e.g. vllm==0.34.0)",
            pointer=pointer,
        )
    under = found.get(base)
    if under is None or under.layered:
        raise InvalidInput(
            f"MASKSCOPE_STACKS: {name!r} is layered over {base!r}, which is not an earlier "
            "stack with an environment of its own",
            pointer=pointer,
        )
    target = settings.stacks_dir / name
    return Stack(name, under.python, (target,), pins, base, line)


@dataclass(frozen=True, slots=True)
class ServeFlags:
    """The ``vllm serve`` flags a replay is made under.

    Attributes:
        reasoning_parser: ``--reasoning-parser`` (None: a ``tools`` source's own, else none).
        structured_outputs_config: ``--structured-outputs-config`` (``backend``,
            ``disable_any_whitespace``, ``enable_in_reasoning``, ...).
        chat_template_kwargs: what the request sends its reasoning parser.
    """

    reasoning_parser: str | None = None
    structured_outputs_config: dict[str, Any] = field(default_factory=dict)
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def for_reasoning(cls, reasoning: str) -> ServeFlags:
        """The flags a replay's ``reasoning`` setting names: ``mask_everywhere`` is vLLM's
        ``enable_in_reasoning``."""
        return cls(
            structured_outputs_config={"enable_in_reasoning": reasoning == "mask_everywhere"}
        )
