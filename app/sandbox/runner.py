"""Runs inside the sandbox process: ``python -I -B -m app.sandbox.runner LIMITS``.

It first limits itself (CPU time, memory, file size, open files, processes), imports what a
Pydantic source may use, then installs an audit hook that refuses files, sockets, processes and
new imports, and only then runs the (already checked) source. It reads one request as JSON on
stdin and writes one answer as JSON on stdout (a file the parent caps in size).
"""

from __future__ import annotations

import io
import json
import resource
import sys
import traceback
import types
from typing import Any

from app.paths import format_path

_SCHEMA_FILE = "<schema>"
_MODULE = "schema"
_BLOCKED = (
    "os.", "subprocess.", "socket.", "shutil.", "ctypes.", "pty.", "fcntl.", "mmap.",
    "webbrowser.", "urllib.", "http.", "ftplib.", "smtplib.", "telnetlib.", "sqlite3.",
)  # fmt: skip


def _limit(limits: dict[str, int]) -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu_s"], limits["cpu_s"] + 1))
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory_bytes"], limits["memory_bytes"]))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["output_bytes"], limits["output_bytes"]))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))


def _warm_up() -> None:
    """Import everything pydantic loads lazily, while imports are still allowed."""
    import datetime
    import decimal  # noqa: F401
    import enum
    import typing
    import uuid  # noqa: F401

    import annotated_types  # noqa: F401
    import pydantic
    import typing_extensions  # noqa: F401

    class _Kind(enum.Enum):
        a = "a"

    class _Warm(pydantic.BaseModel):
        a: typing.Literal["x"] = "x"
        b: list[int] | None = None
        c: typing.Annotated[str, pydantic.Field(max_length=3)] = ""
        d: datetime.date | None = None
        e: _Kind = _Kind.a
        f: dict[str, float] = {}

    _Warm.model_json_schema()
    _Warm.model_validate_json('{"a": "x", "b": [1], "c": "ab", "d": "2020-01-01", "e": "a"}')
    try:
        _Warm.model_validate_json('{"b": ["x"], "e": "z"}')
    except pydantic.ValidationError:
        pass


def _guard(event: str, args: tuple[Any, ...]) -> None:
    if event == "open" or event.startswith(_BLOCKED):
        raise PermissionError(f"the sandbox refuses {event}")
    if event == "import" and args and args[0].split(".")[0] not in sys.modules:
        raise PermissionError(f"the sandbox refuses to import {args[0]}")


def _line_of(error: BaseException) -> int | None:
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == _SCHEMA_FILE]
    return frames[-1].lineno if frames else None


def _models(module: types.ModuleType) -> list[Any]:
    from pydantic import BaseModel

    return [
        value
        for value in vars(module).values()
        if isinstance(value, type) and issubclass(value, BaseModel) and value.__module__ == _MODULE
    ]


def _answer(request: dict[str, Any]) -> dict[str, Any]:
    code = compile(request["source"], _SCHEMA_FILE, "exec")
    module = types.ModuleType(_MODULE)
    sys.modules[_MODULE] = module
    sys.addaudithook(_guard)
    exec(code, module.__dict__)  # the source passed the static check in the server
    models = _models(module)
    if not models:
        return {"ok": False, "error": {"message": "the source defines no pydantic BaseModel"}}
    names = [m.__name__ for m in models]
    wanted = request.get("root_model")
    root = next((m for m in models if m.__name__ == wanted), None) if wanted else models[-1]
    if root is None:
        message = f"no model named {wanted!r}; the source defines {', '.join(names)}"
        return {"ok": False, "error": {"message": message}}
    if request["action"] == "schema":
        return {
            "ok": True,
            "schema": root.model_json_schema(),
            "models": names,
            "root": root.__name__,
        }
    if request["action"] == "validate_many":
        return {"ok": True, "results": [_validate(root, text) for text in request["texts"]]}
    return {"ok": True, "errors": _validate(root, request["text"])}


def _validate(root: Any, text: str) -> list[dict[str, str]]:
    from pydantic import ValidationError

    try:
        root.model_validate_json(text)
    except ValidationError as error:
        return [{"path": format_path(e["loc"]), "message": e["msg"]} for e in error.errors()]
    return []


def main() -> None:
    """Limit, warm up, guard, run, answer."""
    _limit(json.loads(sys.argv[1]))
    _warm_up()
    request = json.loads(sys.stdin.read())
    answer_to = sys.stdout
    sys.stdout = io.StringIO()  # whatever the source prints is not the answer
    try:
        answer = _answer(request)
    except Exception as error:  # pydantic's own errors and anything the source raises
        message = f"{type(error).__name__}: {error}"
        answer = {"ok": False, "error": {"message": message, "line": _line_of(error)}}
    answer_to.write(json.dumps(answer))
    answer_to.flush()


if __name__ == "__main__":
    main()
