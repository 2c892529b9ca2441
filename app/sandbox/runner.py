"""Runs inside the sandbox process: ``python -I -B -m app.sandbox.runner CONFIG``.

In this order: it limits itself (CPU time, memory, file size, open files, processes); imports
everything a Pydantic source may use (every lazy export of pydantic included: nothing can be
imported later); contains itself (``contain.py``: no new privileges, Landlock, user 65534,
seccomp); and only then reads the request (JSON on stdin), installs an audit hook that refuses
files, sockets, processes and new imports, and runs the (already checked) source. It writes one
answer as JSON on stdout, a file the parent caps in size.

``CONFIG`` (JSON, from the server, never from a request) holds the limits, the containment level
required (below it the process refuses to run the source) and the layers to apply: all of them,
except in the tests that prove each layer does its own work.
"""

from __future__ import annotations

import importlib
import io
import json
import resource
import sys
import traceback
import types
from typing import Any

from app.paths import format_path
from app.sandbox.contain import Containment, Level, contain, interpreter_paths
from app.sandbox.reach import load_allowed

_SCHEMA_FILE = "<schema>"
_MODULE = "schema"
_BLOCKED = (
    "os.", "subprocess.", "socket.", "shutil.", "ctypes.", "pty.", "fcntl.", "mmap.",
    "webbrowser.", "urllib.", "http.", "ftplib.", "smtplib.", "telnetlib.", "sqlite3.",
)  # fmt: skip


def _limit(limits: dict[str, int], *, nproc: bool) -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu_s"], limits["cpu_s"] + 1))
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory_bytes"], limits["memory_bytes"]))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["output_bytes"], limits["output_bytes"]))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if nproc:
        resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))


def _warm_up() -> None:
    """Import everything pydantic loads lazily, and run the code paths that load more."""
    load_allowed()
    import datetime
    import decimal
    import enum
    import typing
    import uuid

    import pydantic

    class _Kind(enum.Enum):
        a = "a"

    item = typing.TypeVar("item")

    class _Box(pydantic.BaseModel, typing.Generic[item]):
        value: item

    class _Warm(pydantic.BaseModel):
        a: typing.Literal["x"] = "x"
        b: list[int] | None = None
        c: typing.Annotated[str, pydantic.Field(max_length=3)] = ""
        d: datetime.date | None = None
        e: _Kind = _Kind.a
        f: dict[str, float] = {}
        g: pydantic.AnyUrl | None = None
        h: pydantic.IPvAnyAddress | None = None
        i: pydantic.SecretStr | None = None
        j: pydantic.Json[list[int]] | None = None
        k: _Box[int] | None = None
        m: decimal.Decimal | uuid.UUID | None = None

    _Warm.model_json_schema()
    _Warm.model_validate_json(
        '{"a": "x", "b": [1], "c": "ab", "d": "2020-01-01", "e": "a", "g": "https://a.b/c",'
        ' "h": "::1", "i": "s", "j": "[1]", "k": {"value": 1}, "m": "1.5"}'
    )
    try:
        _Warm.model_validate_json('{"b": ["x"], "e": "z", "g": "no", "h": "x", "j": "["}')
    except pydantic.ValidationError as error:
        error.errors()


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


def _answer(request: dict[str, Any], *, audit_hook: bool) -> dict[str, Any]:
    code = compile(request["source"], _SCHEMA_FILE, "exec", dont_inherit=True)
    module = types.ModuleType(_MODULE)
    sys.modules[_MODULE] = module
    if audit_hook:
        sys.addaudithook(_guard)
    exec(code, module.__dict__)  # the source passed the static check in the server
    models = _models(module)
    if not models:
        return {"ok": False, "error": {"message": "the source defines no pydantic BaseModel"}}
    names = [m.__name__ for m in models]
    if request["action"] == "schemas":
        found = {m.__name__: m for m in models}
        each = [_schema_of(found.get(name), name, names) for name in request["root_models"]]
        return {"ok": True, "models": names, "schemas": each}
    wanted = request.get("root_model")
    root = next((m for m in models if m.__name__ == wanted), None) if wanted else models[-1]
    if root is None:
        return {"ok": False, "error": {"message": _missing(str(wanted), names)}}
    if request["action"] == "schema":
        return {
            "ok": True,
            "schema": root.model_json_schema(),
            "models": names,
            "root": root.__name__,
        }
    return {"ok": True, "errors": [_validate(root, text) for text in request["texts"]]}


def _missing(name: str, names: list[str]) -> str:
    return f"no model named {name!r}; the source defines {', '.join(names)}"


def _schema_of(model: Any, name: str, names: list[str]) -> dict[str, Any]:
    """One requested model's JSON Schema, or the error deriving it (the others still run)."""
    if model is None:
        return {"error": {"message": _missing(name, names)}}
    try:
        return {"schema": model.model_json_schema()}
    except Exception as error:  # pydantic's own errors and anything the source raises
        return {"error": {"message": f"{type(error).__name__}: {error}", "line": _line_of(error)}}


def _validate(root: Any, text: str) -> list[dict[str, str]]:
    from pydantic import ValidationError

    try:
        root.model_validate_json(text)
    except ValidationError as error:
        return [{"path": format_path(e["loc"]), "message": e["msg"]} for e in error.errors()]
    return []


def _contain(config: dict[str, Any]) -> Containment:
    layers = config["layers"]
    done = contain(
        readable=interpreter_paths(),
        uid=layers["uid"],
        landlock_on=layers["landlock"],
        seccomp_on=layers["seccomp"],
    )
    if "ctypes" not in layers["preload"]:
        # Put ctypes away: imported again, it meets the audit hook (not a wall, but a first one).
        for name in [n for n in sys.modules if n.partition(".")[0] in ("ctypes", "_ctypes")]:
            del sys.modules[name]
    return done


def _run(config: dict[str, Any]) -> dict[str, Any]:
    if config["probe"]:
        return {"ok": True, "containment": _contain(config).to_dict()}
    _warm_up()
    for name in config["layers"]["preload"]:
        importlib.import_module(name)
    contained = _contain(config)
    required = Level(config["require"])
    if not contained.level.at_least(required):
        message = (
            f"the sandbox process reached containment level {contained.level.value!r}, "
            f"below the {required.value!r} required: {contained.describe()}"
        )
        return {"ok": False, "error": {"message": message, "code": "sandbox_unconfined"}}
    request = json.loads(sys.stdin.read())
    try:
        return _answer(request, audit_hook=config["layers"]["audit_hook"])
    except Exception as error:  # pydantic's own errors and anything the source raises
        message = f"{type(error).__name__}: {error}"
        return {"ok": False, "error": {"message": message, "line": _line_of(error)}}


def main() -> None:
    """Limit, warm up, contain, guard, run, answer."""
    config = json.loads(sys.argv[1])
    _limit(config["limits"], nproc=config["layers"]["nproc"])
    answer_to = sys.stdout
    sys.stdout = io.StringIO()  # whatever the source prints is not the answer
    answer_to.write(json.dumps(_run(config)))
    answer_to.flush()


if __name__ == "__main__":
    main()
