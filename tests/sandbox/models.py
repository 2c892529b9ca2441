"""Pydantic sources for the tests of several models at once: many small models, and models that
take pydantic seconds to derive; and what the tests wait for."""

from __future__ import annotations

import sys
import time
import types
import uuid
from pathlib import Path
from typing import Any

from pydantic import BaseModel

__all__ = ["SLOW_NAMES", "gone", "many_models", "pydantic_here", "slow_models", "wait_for"]


def many_models(count: int) -> str:
    """A source of ``count`` small models, each with fields of its own (never cached before)."""
    lines = ["from typing import Literal", "from pydantic import BaseModel, Field", ""]
    for k in range(count):
        lines += [
            f"class M{k}(BaseModel):",
            f'    kind: Literal["m{k}"] = "m{k}"',
            f"    size_{k}: int = Field(..., ge={k}, le={k + 100})",
            f"    note: str = Field(default='', max_length={k + 1})",
        ]
    return "\n".join([*lines, f"# {uuid.uuid4()}"])


def slow_models() -> str:
    """A source pydantic takes seconds to build and derive (bench/flood.py's shape): a run for
    :data:`SLOW_NAMES` lasts about 4 s on an idle core."""
    lines = ["from typing import Optional, Union", "from pydantic import BaseModel"]
    for k in range(100):
        lines.append(f"class S{k}(BaseModel):")
        for f in range(14):
            kind = f"Optional[list[dict[str, S{k - 1}]]]" if k else "int"
            if k > 1 and f % 2:
                kind = f"Union[S{k - 1}, S{k - 2}, None]"
            lines.append(f"    f{f}: {kind} = None")
    return "\n".join([*lines, f"# {uuid.uuid4()}"])


#: The slow source's models a request names.
SLOW_NAMES = [f"S{k}" for k in range(99, 89, -1)]


def gone(pid: int) -> bool:
    """Whether no process has ``pid`` (killed and reaped)."""
    return not Path(f"/proc/{pid}").exists()


def wait_for(condition: Any, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "waited too long"
        time.sleep(0.01)


def pydantic_here(source: str) -> dict[str, Any]:
    """Each model's schema as pydantic derives it in this process (the test's own source)."""
    module = types.ModuleType("schema_here")
    sys.modules[module.__name__] = module  # where pydantic resolves the annotations
    try:
        exec(compile(source, "<test>", "exec"), module.__dict__)
        return {
            name: value.model_json_schema()
            for name, value in vars(module).items()
            if isinstance(value, type) and issubclass(value, BaseModel) and name.startswith("M")
        }
    finally:
        del sys.modules[module.__name__]
