"""The sandbox process: schemas derived, outputs validated, and limits that hold even when the
static check is bypassed (the process is the second wall, not the only one)."""

from __future__ import annotations

import ast
import gc
import json
import tempfile
import threading
import time
from pathlib import Path

import pytest

from app.examples import EXAMPLES_DIR
from app.exceptions import PydanticFailed, SourceRefused
from app.sandbox.process import Limits, run_child
from app.sandbox.sandbox import Sandbox

HEAD = "from typing import Literal\nfrom pydantic import BaseModel, Field\n"
PWNED = Path(tempfile.gettempdir()).parent / "tmp" / "maskscope-pwned"


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    return Sandbox(Limits(cpu_s=2, wall_s=5))


@pytest.mark.parametrize("name", ["pricing", "router", "candidate", "risk", "nested"])
def test_each_example_derives_its_json_schema(sandbox: Sandbox, name: str) -> None:
    derived = sandbox.schema((EXAMPLES_DIR / f"{name}.py").read_text())
    assert derived.schema == json.loads((EXAMPLES_DIR / f"{name}.json").read_text())
    assert derived.root == derived.models[-1]


def test_the_root_model_can_be_picked(sandbox: Sandbox) -> None:
    source = (EXAMPLES_DIR / "router.py").read_text()
    derived = sandbox.schema(source, "Respond")
    assert derived.root == "Respond" and derived.models == (
        "FetchUserFeatures",
        "Respond",
        "Router",
    )
    assert derived.schema["properties"]["tool_name"]["const"] == "respond"
    with pytest.raises(PydanticFailed) as caught:
        sandbox.schema(source, "Nope")
    assert caught.value.message == (
        "no model named 'Nope'; the source defines FetchUserFeatures, Respond, Router"
    )


def test_pydantic_errors_come_back_with_their_line(sandbox: Sandbox) -> None:
    source = HEAD + "class A(BaseModel):\n    x: int = Field(discriminator='kind')\n"
    with pytest.raises(PydanticFailed) as caught:
        sandbox.schema(source)
    assert "is not a valid discriminated union variant" in caught.value.message
    assert caught.value.line == 3  # the class statement that pydantic refused
    with pytest.raises(PydanticFailed) as none:
        sandbox.schema(HEAD + "X = Literal['a']\n")
    assert none.value.message == "the source defines no pydantic BaseModel"


def test_validation_uses_the_model_itself(sandbox: Sandbox) -> None:
    source = (EXAMPLES_DIR / "candidate.py").read_text()
    good = sandbox.validate(
        source, None, '{"summary": "ok", "rating": 7, "recommendation": "hire"}'
    )
    assert good.valid and good.errors == ()
    bad = sandbox.validate(source, None, '{"summary": "ok", "rating": 11, "recommendation": "x"}')
    assert [(e.path, e.message) for e in bad.errors] == [
        ("$.rating", "Input should be less than or equal to 10"),
        ("$.recommendation", "Input should be 'hire', 'reject' or 'hold'"),
    ]
    broken = sandbox.validate(source, None, '{"summary": ')
    assert not broken.valid and broken.errors[0].path == "$"


def test_the_static_check_runs_first(sandbox: Sandbox) -> None:
    with pytest.raises(SourceRefused):
        sandbox.schema("import os")


def _child(source: str, limits: Limits | None = None) -> str:
    """Run a source with the static check bypassed; the error the child reports."""
    request = {"action": "schema", "source": source, "root_model": None}
    answer = run_child(request, limits or Limits(cpu_s=2, wall_s=5))
    assert answer["ok"] is False
    return str(answer["error"]["message"])


@pytest.mark.parametrize(
    ("source", "said"),
    [
        (f"import os\nos.system('touch {PWNED}')", "the sandbox refuses os.system"),
        (f"open('{PWNED}', 'w').write('x')", "the sandbox refuses open"),
        ("open('/etc/passwd').read()", "the sandbox refuses open"),
        ("import socket\nsocket.socket()", "the sandbox refuses socket"),
        ("import subprocess", "the sandbox refuses to import subprocess"),
        ("import ctypes", "the sandbox refuses to import ctypes"),
        ("import os\nos.fork()", "the sandbox refuses os.fork"),
        ("x = bytearray(8 * 1024 ** 3)", "MemoryError"),
    ],
)
def test_the_process_refuses_what_the_check_would(source: str, said: str) -> None:
    assert said in _child(source)
    assert not PWNED.exists()


def test_the_process_has_no_environment_and_a_temporary_directory() -> None:
    said = _child("import os\nraise RuntimeError(repr(sorted(os.environ)) + ' ' + os.getcwd())")
    names, cwd = said.removeprefix("RuntimeError: ").split(" ")
    assert set(ast.literal_eval(names)) <= {
        "LC_CTYPE"
    }  # Python's own locale coercion (PEP 538), nothing else
    assert Path(cwd).name.startswith("maskscope-sandbox-")
    leftovers = list(Path(tempfile.gettempdir()).glob("maskscope-sandbox-*"))
    assert leftovers == []


def test_cpu_time_is_limited() -> None:
    started = time.monotonic()
    with pytest.raises(PydanticFailed) as caught:
        _child("while True:\n    pass", Limits(cpu_s=1, wall_s=10))
    assert caught.value.message == "the source used more than 1 s of CPU time"
    assert time.monotonic() - started < 8


def test_wall_time_is_limited() -> None:
    with pytest.raises(PydanticFailed) as caught:
        _child("import time\ntime.sleep(30)", Limits(wall_s=1))
    assert caught.value.message == "the source ran longer than the 1 s allowed"


def test_output_size_is_limited() -> None:
    source = HEAD + "class A(BaseModel):\n    x: int = Field(description='a' * 3_000_000)\n"
    with pytest.raises(PydanticFailed) as caught:
        run_child({"action": "schema", "source": source, "root_model": None},
                  Limits(output_bytes=1_000_000))  # fmt: skip
    assert caught.value.message == "the schema is larger than the 1000000 bytes allowed"


def test_static_checks_in_threads_at_once_never_fail_inside_ast_parse(sandbox: Sandbox) -> None:
    # A model of 60 classes, then a refused import: parsed in full, refused, no process run.
    lines = ["from pydantic import BaseModel"]
    for k in range(60):
        lines += [f"class M{k}(BaseModel):"] + [
            f"    f{f}: list[dict[str, int]] = []" for f in range(12)
        ]
    source = "\n".join([*lines, "import os"])
    outcomes: list[str] = []

    def check() -> None:
        for _ in range(10):
            try:
                sandbox.schema(source)
            except SourceRefused:
                outcomes.append("refused")
            except SystemError as error:  # CPython 3.11's ast state shared by threads
                outcomes.append(str(error))

    def switch(phase: str, info: dict[str, int]) -> None:
        time.sleep(0)  # Python code the collector runs may switch threads in the middle of a parse

    gc.callbacks.append(switch)
    try:
        threads = [threading.Thread(target=check) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    finally:
        gc.callbacks.remove(switch)
    assert outcomes == ["refused"] * 40
