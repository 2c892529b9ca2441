"""What pydantic calls in a source (alias generators, default factories, title generators...) is
refused unless it is a pure function or a class the source defines (issue #46, item 6).

The sandbox runs here with the kernel's containment off (every layer, and the audit hook), so a
source that passes the static check really runs: the control shows it removing or creating a file
in the sandbox's working directory, and the check is what keeps it from running at all.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import app.sandbox.sandbox as sandbox_module
from app.exceptions import SourceRefused
from app.sandbox.check import check_source
from app.sandbox.contain import Level
from app.sandbox.process import Layers, Limits, run_child
from app.sandbox.sandbox import Sandbox

OFF = Layers(nproc=False, uid=False, landlock=False, seccomp=False, audit_hook=False)
LIMITS = Limits(cpu_s=5, wall_s=20)
HEAD = "from pydantic import BaseModel, ConfigDict, DirectoryPath, Field\n"


@pytest.fixture
def workdir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The sandbox's runs, every layer off, in ``tmp_path`` as their working directory."""

    @contextmanager
    def fixed(prefix: str = "") -> Iterator[str]:
        yield str(tmp_path)

    def unconfined(request: dict[str, Any], limits: Limits, **given: Any) -> dict[str, Any]:
        given.update(require=Level.NONE, layers=OFF)  # a cancel, when given, is kept
        return run_child(request, limits, **given)

    monkeypatch.setattr(tempfile, "TemporaryDirectory", fixed)  # what process.py calls
    monkeypatch.setattr(sandbox_module, "run_child", unconfined)
    return tmp_path


def _bypassing_the_check(source: str) -> None:
    """Run ``source`` in the unconfined sandbox process, the static check skipped."""
    run_child({"action": "schema", "source": source, "root_model": None}, LIMITS,
              require=Level.NONE, layers=OFF)  # fmt: skip


# (id, source, line, column): each makes pydantic call pathlib.Path.unlink("victim").
UNLINKS = [
    (
        "config",
        HEAD + "class A(BaseModel):\n"
        "    model_config = ConfigDict(alias_generator=DirectoryPath.unlink)\n"
        "    victim: int = 0\n",
        3,
        47,
    ),
    (
        "class-keyword",
        HEAD + "class A(BaseModel, alias_generator=DirectoryPath.unlink):\n    victim: int = 0\n",
        2,
        36,
    ),
    (
        "config-dict",
        HEAD + "class A(BaseModel):\n"
        "    model_config = {'alias_generator': DirectoryPath.unlink}\n"
        "    victim: int = 0\n",
        3,
        40,
    ),
    (
        "field-title",  # called as unlink(name, field_info): missing_ok=field_info
        HEAD + "class A(BaseModel):\n"
        "    model_config = ConfigDict(field_title_generator=DirectoryPath.unlink)\n"
        "    victim: int = 0\n",
        3,
        53,
    ),
]


@pytest.mark.parametrize(
    ("source", "line", "column"), [u[1:] for u in UNLINKS], ids=[u[0] for u in UNLINKS]
)
def test_a_path_method_that_pydantic_calls_is_refused_and_removes_no_file(
    workdir: Path, source: str, line: int, column: int
) -> None:
    victim = workdir / "victim"
    victim.write_text("kept")
    _bypassing_the_check(source)
    assert not victim.exists()  # the control: unconfined, pydantic really removes it
    victim.write_text("kept")
    with pytest.raises(SourceRefused) as caught:
        Sandbox(LIMITS, allow=Level.NONE).schema(source)
    assert victim.read_text() == "kept"
    assert (caught.value.line, caught.value.column) == (line, column)
    assert caught.value.message.startswith(f"line {line}, column {column}: ")
    assert "pydantic calls DirectoryPath.unlink (pathlib.Path.unlink), which is not pure" in (
        caught.value.message
    )


@pytest.mark.parametrize("method", ["touch", "mkdir"])
def test_a_path_method_that_would_create_a_file_is_refused_and_creates_none(
    workdir: Path, method: str
) -> None:
    source = (
        HEAD + f"class A(BaseModel, alias_generator=DirectoryPath.{method}):\n    victim: int\n"
    )
    _bypassing_the_check(source)
    assert (workdir / "victim").exists()  # the control
    if method == "mkdir":
        (workdir / "victim").rmdir()
    else:
        (workdir / "victim").unlink()
    with pytest.raises(SourceRefused) as caught:
        Sandbox(LIMITS, allow=Level.NONE).schema(source)
    assert not (workdir / "victim").exists()
    assert caught.value.line == 2
    assert f"pydantic calls DirectoryPath.{method} (pathlib.Path.{method})" in caught.value.message


# (id, pure one that derives its schema, the same place given something else, what is refused)
PAIRS = [
    (
        "alias-generator",
        "model_config = ConfigDict(alias_generator=str.upper)",
        "model_config = ConfigDict(alias_generator=str.format)",
        "alias_generator: pydantic calls str.format, which is not pure",
    ),
    (
        "default-factory",
        "when: str = Field(default_factory=uuid.uuid4)",
        "when: str = Field(default_factory=uuid.getnode)",
        "default_factory: pydantic calls uuid.getnode, which is not pure",
    ),
    (
        "a-class-of-the-source",
        "b: B = Field(default_factory=B)",
        "b: B = Field(default_factory=B.model_construct)",
        "default_factory: pydantic calls B.model_construct, which is not pure",
    ),
    (
        "schema-extra",
        "victim: int = Field(0, json_schema_extra={'examples': [1]})",
        "victim: int = Field(0, json_schema_extra=DirectoryPath.unlink)",
        "json_schema_extra: pydantic calls DirectoryPath.unlink (pathlib.Path.unlink)",
    ),
]


@pytest.mark.parametrize(
    ("pure", "other", "said"), [p[1:] for p in PAIRS], ids=[p[0] for p in PAIRS]
)
def test_pure_functions_and_the_sources_classes_pass_and_the_rest_is_refused(
    workdir: Path, pure: str, other: str, said: str
) -> None:
    head = HEAD + "import uuid\nclass B(BaseModel):\n    y: int = 0\nclass A(BaseModel):\n"
    derived = Sandbox(LIMITS, allow=Level.NONE).schema(head + f"    {pure}\n    victim: int = 0\n")
    assert derived.root == "A"
    if "upper" in pure:
        assert set(derived.schema["properties"]) == {"VICTIM"}
    with pytest.raises(SourceRefused) as caught:
        check_source(head + f"    {other}\n    victim: int = 0\n")
    assert caught.value.line == 6
    assert said in caught.value.message


# (id, source, what the refusal says, line): other ways to hand pydantic a function.
OTHER_WAYS = [
    (
        "a-method-of-the-model",  # model_post_init, model_parametrized_name... are called
        HEAD + "class A(BaseModel):\n    model_post_init = DirectoryPath.unlink\n",
        "DirectoryPath.unlink is the function pathlib.Path.unlink: pydantic may call",
        3,
    ),
    (
        "annotated-metadata",
        HEAD + "from typing import Annotated\nclass A(BaseModel):\n"
        "    x: Annotated[int, DirectoryPath.unlink]\n",
        "DirectoryPath.unlink is the function pathlib.Path.unlink",
        4,
    ),
    (
        "a-module-alias",
        HEAD + "generate = DirectoryPath.unlink\nclass A(BaseModel):\n"
        "    model_config = ConfigDict(alias_generator=generate)\n",
        "alias_generator: pydantic calls generate, which is not pure",
        4,
    ),
    (
        "config-positional",
        HEAD + "class A(BaseModel):\n"
        "    model_config = ConfigDict([('alias_generator', DirectoryPath)])\n",
        "ConfigDict takes its settings as keywords only",
        3,
    ),
    (
        "json-encoders",
        HEAD + "class A(BaseModel):\n"
        "    model_config = ConfigDict(json_encoders={'int': DirectoryPath.rmdir})\n",
        "json_encoders: pydantic calls DirectoryPath.rmdir (pathlib.Path.rmdir)",
        3,
    ),
    (
        "exclude-if",
        HEAD + "class A(BaseModel):\n    x: int = Field(0, exclude_if=DirectoryPath.exists)\n",
        "exclude_if: pydantic calls DirectoryPath.exists (pathlib.Path.exists)",
        3,
    ),
    (
        "model-title",
        HEAD + "import datetime\nclass A(BaseModel):\n"
        "    model_config = ConfigDict(model_title_generator=datetime.datetime.fromtimestamp)\n",
        "model_title_generator: pydantic calls datetime.datetime.fromtimestamp",
        4,
    ),
    (
        "a-builtin-types-method",
        HEAD + "class A(BaseModel):\n    x: int = Field(default_factory=dict.fromkeys)\n",
        "default_factory: pydantic calls dict.fromkeys, which is not pure",
        3,
    ),
]


@pytest.mark.parametrize(
    ("source", "said", "line"), [w[1:] for w in OTHER_WAYS], ids=[w[0] for w in OTHER_WAYS]
)
def test_every_other_way_to_hand_pydantic_a_function_is_refused_with_its_line(
    source: str, said: str, line: int
) -> None:
    with pytest.raises(SourceRefused) as caught:
        check_source(source)
    assert said in caught.value.message
    assert caught.value.line == line


def test_pydantic_s_own_alias_generators_run_in_the_contained_sandbox() -> None:
    source = (
        "from pydantic import BaseModel, ConfigDict\n"
        "from pydantic.alias_generators import to_camel\n"
        "class A(BaseModel):\n"
        "    model_config = ConfigDict(alias_generator=to_camel)\n"
        "    user_name: str\n"
    )
    derived = Sandbox(LIMITS).schema(source)
    assert set(derived.schema["properties"]) == {"userName"}
