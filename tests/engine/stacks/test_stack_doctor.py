"""The Doctor on a ``tools`` source under each real release (issue #40): the tag that release's
own builder makes, examined as its structure says (vLLM 0.34.0's GLM-4.7 tag keeps every
non-strict value as raw text; 0.32.0's compiles the array value as JSON)."""

from __future__ import annotations

from typing import Any

from app.doctor import Doctor, DoctorReport, Status
from app.engine import Engine
from app.engine.grammars.spec import CompileOptions, GrammarSpec
from app.engine.stacks import runner
from app.settings import Settings
from app.suite.stacked import with_stack_tools
from app.vocabulary import GrammarKind
from tests.engine.stacks.test_diff import GLM

PREFIX = "/tools/0/function/parameters"


def examined(settings: Settings, qwen: Engine[Any], stack: str) -> DoctorReport:
    """GLM-4.7's source examined on the tag ``stack``'s builder makes."""
    engine = with_stack_tools(qwen, runner(settings, stack))
    spec = GrammarSpec(GrammarKind.TOOLS, GLM, CompileOptions())
    build = engine.compile(spec).tools
    assert build is not None and build.builder_versions["vllm"] == stack.removeprefix("vllm-")
    return Doctor.of(engine).examine(spec)


def test_glm47_under_0_34_0_calls_search_with_its_values_as_raw_text(
    settings: Settings, qwen: Engine[Any]
) -> None:
    """The wrong finding: "the tag built has no call of search", where the tag calls it with
    every value kept as raw text."""
    report = examined(settings, qwen, "vllm-0.34.0")
    said = [m.message for row in report.backends for m in row.messages]
    assert not [m for m in said if "no call of" in m], said
    rows = {k.pointer: k for k in report.keywords}
    for name in ("query", "paths"):
        row = rows[f"{PREFIX}/properties/{name}/type"]
        assert row.status is Status.IGNORED and "raw text" in row.detail, row
    assert rows[f"{PREFIX}/properties/paths/items"].status is Status.IGNORED
    assert rows[f"{PREFIX}/required"].status is Status.IGNORED  # any parameter may be left out


def test_glm47_under_0_32_0_examines_the_array_value_at_its_parameter(
    settings: Settings, qwen: Engine[Any]
) -> None:
    """0.32.0's ``{"type": "array"}`` leaf is the value of ``paths``, not every argument's
    schema: its rows are at ``paths``, and the ``items`` the builder left out is ignored."""
    report = examined(settings, qwen, "vllm-0.32.0")
    rows = {k.pointer: k for k in report.keywords}
    assert f"{PREFIX}/type" not in rows
    assert rows[f"{PREFIX}/properties/paths/type"].status is Status.ENFORCED
    assert rows[f"{PREFIX}/properties/paths/items"].status is Status.IGNORED
    assert "raw text" in rows[f"{PREFIX}/properties/query/type"].detail
