"""The sandbox process: schemas derived, outputs validated, and limits that hold even when the
static check is bypassed (the process is the second wall, not the only one)."""

from __future__ import annotations

import ast
import gc
import json
import logging
import os
import sys
import tempfile
import threading
import time
import types
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from app.examples import EXAMPLES_DIR
from app.exceptions import PydanticFailed, SandboxUnconfined, SourceRefused
from app.sandbox.check import CheckedSource
from app.sandbox.contain import Level
from app.sandbox.process import Limits, run_child
from app.sandbox.sandbox import Sandbox
from tests.sandbox.attacks import BUILTIN_NAMED_FIELDS, SHADOWING, with_future_annotations

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
    assert not Path(cwd).exists()  # removed afterwards


def test_cpu_time_is_limited() -> None:
    # The CPU limit, not the wall limit, ended it: the message names the one that tripped.
    with pytest.raises(PydanticFailed) as caught:
        _child("while True:\n    pass", Limits(cpu_s=1, wall_s=10))
    assert caught.value.message == "the source used more than 1 s of CPU time"


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


def _unconfined(source: str) -> dict[str, Any]:
    """What pydantic itself derives for a (trusted) source, run here without a sandbox."""
    module = types.ModuleType("unconfined_schema")
    sys.modules[module.__name__] = module  # where pydantic resolves forward references
    try:
        exec(compile(source, "<trusted>", "exec", dont_inherit=True), module.__dict__)
        models = [
            v for v in vars(module).values() if isinstance(v, type) and issubclass(v, BaseModel)
        ]
        schema: dict[str, Any] = models[-1].model_json_schema()
    finally:
        del sys.modules[module.__name__]
    return schema


LAZY_TYPES = [
    HEAD + "from pydantic import AnyUrl, HttpUrl\nclass A(BaseModel):\n    a: AnyUrl\n"
    "    b: HttpUrl | None = None\n",
    HEAD + "from pydantic import IPvAnyAddress, IPvAnyNetwork\nclass A(BaseModel):\n"
    "    a: IPvAnyAddress\n    b: list[IPvAnyNetwork] = []\n",
    HEAD + "from pydantic import SecretStr, SecretBytes\nclass A(BaseModel):\n    a: SecretStr\n"
    "    b: SecretBytes | None = None\n",
    HEAD + "from pydantic import Json\nclass A(BaseModel):\n    a: Json[list[int]]\n    b: Json\n",
    HEAD + "from typing import Generic, TypeVar\nT = TypeVar('T', bound='Item')\n"
    "class Item(BaseModel):\n    name: str\n"
    "class Page(BaseModel, Generic[T]):\n    items: list[T]\n    next: 'Page[T] | None' = None\n"
    "class Catalog(BaseModel):\n    page: Page[Item]\n",
]


@pytest.mark.parametrize("source", LAZY_TYPES, ids=["url", "ip", "secret", "json", "generic"])
def test_lazily_imported_types_derive_what_pydantic_derives_unconfined(
    sandbox: Sandbox, source: str
) -> None:
    assert sandbox.schema(source).schema == _unconfined(source)


def test_every_lazy_export_of_pydantic_imports_in_the_sandbox(sandbox: Sandbox) -> None:
    import pydantic

    names = sorted(n for n in set(pydantic.__all__) if not n.startswith("_"))
    source = f"from pydantic import {', '.join(names)}\nclass A(BaseModel):\n    x: int\n"
    assert sandbox.schema(source).models == ("A",)


def test_many_texts_are_validated_in_one_process(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    import app.sandbox.sandbox as module

    runs: list[dict[str, Any]] = []

    def counted(request: dict[str, Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        runs.append(request)
        return run_child(request, *args, **kwargs)

    monkeypatch.setattr(module, "run_child", counted)
    source = (EXAMPLES_DIR / "candidate.py").read_text()
    texts = [
        '{"summary": "ok", "rating": 7, "recommendation": "hire"}',
        '{"summary": "ok", "rating": 11, "recommendation": "hire"}',
        "not json",
    ]
    verdicts = sandbox.validate_many(source, None, texts)
    assert len(runs) == 1
    assert [v.valid for v in verdicts] == [True, False, False]
    assert verdicts[1].errors[0].path == "$.rating"
    assert sandbox.validate(source, None, texts[1]) == verdicts[1]
    assert sandbox.validate_many(source, None, []) == [] and len(runs) == 2


@pytest.mark.parametrize("depth", [300, 200_000])
def test_a_deeply_nested_answer_is_refused_not_a_recursion_error(depth: int) -> None:
    source = f"import os\nos.write(1, b'[' * {depth} + b']' * {depth})\nos._exit(0)\n"
    with pytest.raises(PydanticFailed) as caught:
        run_child({"action": "schema", "source": source, "root_model": None}, Limits())
    assert caught.value.message == "the sandbox's answer nests deeper than 200 levels"


@pytest.mark.parametrize(
    "answer",
    [
        b'{"ok": true, "schema": 5, "models": ["A"], "root": "A"}',
        b'{"ok": true, "schema": {}}',
        b'{"ok": false, "error": {"message": "x", "line": "one"}}',
        b'{"ok": false, "error": ["x"]}',
        b"[1, 2]",
    ],
)
def test_a_forged_answer_is_refused_as_malformed(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch, answer: bytes
) -> None:
    import app.sandbox.sandbox as module

    monkeypatch.setattr(module, "check_source", CheckedSource)  # a hole: any source passes
    source = f"import os\nos.write(1, {answer!r})\nos._exit(0)\n"
    with pytest.raises(PydanticFailed) as caught:
        sandbox.schema(source)
    said = caught.value
    assert said.message in ("the sandbox process gave a malformed answer", "x")
    assert said.line is None


def test_below_the_allowed_level_pydantic_sources_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import app.sandbox.sandbox as module

    monkeypatch.setattr(module, "probe", lambda limits: (Level.SECCOMP, "landlock: ENOSYS"))
    strict = Sandbox(Limits(cpu_s=2, wall_s=5))
    source = (EXAMPLES_DIR / "risk.py").read_text()
    with pytest.raises(SandboxUnconfined) as caught:
        strict.schema(source)
    assert caught.value.message == (
        "Pydantic sources are refused: the sandbox reaches containment level 'seccomp' on this "
        "server, below 'full' (landlock: ENOSYS). The operator can accept it with "
        "MASKSCOPE_SANDBOX_ALLOW_WEAK_CONTAINMENT=seccomp."
    )
    with pytest.raises(SandboxUnconfined):
        strict.validate(source, None, "{}")
    lenient = Sandbox(Limits(cpu_s=2, wall_s=5), allow=Level.SECCOMP)
    assert lenient.level is Level.SECCOMP
    assert lenient.schema(source).root == "RiskAssessment"


def test_the_level_is_probed_once_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    from app.sandbox import landlock

    caplog.set_level(logging.INFO, logger="app.sandbox.sandbox")
    fresh = Sandbox(Limits(cpu_s=2, wall_s=5))
    assert fresh.level is Level.FULL and fresh.level is Level.FULL
    dropped = "root dropped to 65534" if os.geteuid() == 0 else "not root, kept"
    assert caplog.messages == [
        f"sandbox containment: full (uid {dropped}, no_new_privs, "
        f"Landlock ABI {landlock.abi_version()}, seccomp)"
    ]


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


@pytest.mark.parametrize(
    ("source", "said", "line"), [s[1:] for s in SHADOWING], ids=[s[0] for s in SHADOWING]
)
def test_a_shadowing_payload_is_refused_before_pydantic_evaluates_it(
    sandbox: Sandbox, source: str, said: str, line: int
) -> None:
    # The payload is live: run with the check bypassed, pydantic evaluates the string in it.
    assert _child(source) == "ZeroDivisionError: division by zero"
    with pytest.raises(SourceRefused) as caught:
        sandbox.schema(source)
    assert caught.value.line == line
    assert f"line {line}, column " in caught.value.message
    assert said in caught.value.message


def test_fields_named_like_builtins_derive_what_pydantic_derives(sandbox: Sandbox) -> None:
    derived = sandbox.schema(BUILTIN_NAMED_FIELDS)
    assert derived.schema == _unconfined(BUILTIN_NAMED_FIELDS)
    cat = derived.schema["$defs"]["Cat"]["properties"]
    assert cat["date"] == {"format": "date", "title": "Date", "type": "string"}
    assert cat["type"]["const"] == "cat" and cat["min"]["default"] == 0
    assert derived.schema["properties"]["pet"]["discriminator"]["propertyName"] == "type"
    future = sandbox.schema(with_future_annotations(BUILTIN_NAMED_FIELDS))
    assert future.schema == derived.schema


@pytest.mark.parametrize("name", ["pricing", "router", "candidate", "risk", "nested"])
def test_an_example_with_the_future_import_derives_the_same_schema(
    sandbox: Sandbox, name: str
) -> None:
    source = with_future_annotations((EXAMPLES_DIR / f"{name}.py").read_text())
    assert source.count("from __future__ import annotations") == 1
    derived = sandbox.schema(source)
    assert derived.schema == json.loads((EXAMPLES_DIR / f"{name}.json").read_text())
