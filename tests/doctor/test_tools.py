"""The Doctor on ``tools`` sources (real model tokenizer, real xgrammar, vLLM's own builder): each
tool's parameters examined as the tag built compiles them, pointers and lines into the tools
source, and the backend rows read from the tag."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.doctor import Doctor, DoctorReport, Status, Verdict
from app.doctor.tools import tool_leaves
from app.engine import Engine, GrammarKind, GrammarSpec
from app.engine.jsonpointer import locate
from app.main import create_app
from app.settings import Settings
from tests.conftest import as_page
from tests.doctor.conftest import counted

#: What xgrammar ignores in a schema: ``uniqueItems`` (and ``maxItems`` beside it is kept).
TAGS = {
    "type": "object",
    "properties": {
        "tags": {"type": "array", "items": {"type": "integer"}, "maxItems": 3, "uniqueItems": True},
    },
    "required": ["tags"],
    "additionalProperties": False,
}
DAYS = {"type": "object", "properties": {"days": {"type": "integer", "maximum": 7}},
        "required": ["days"]}  # fmt: skip
PREFIX = "/tools/0/function/parameters"


def tool(name: str, parameters: Any, **function: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": parameters, **function}}


def source(tools: list[dict[str, Any]], **fields: Any) -> str:
    data = {"builder": "xgrammar", "format": "qwen_3", "tools": tools,
            "tool_choice": "required", "reasoning": "disabled", **fields}  # fmt: skip
    return json.dumps(data, indent=2)


def examine(doctor: Doctor, text: str) -> DoctorReport:
    return counted(doctor.examine(GrammarSpec(GrammarKind.TOOLS, text), seed=0))


def _row(report: DoctorReport, backend: str) -> Any:
    return next(b for b in report.backends if b.backend == backend)


@pytest.fixture(scope="module")
def doctor(engine: Engine) -> Doctor:
    return Doctor.of(engine)


@pytest.fixture(scope="module")
def strict_report(doctor: Doctor) -> tuple[str, DoctorReport]:
    """Two tools, the second a prefix-named one whose schema the leaf matching must not mix up."""
    text = source([tool("get_tags", TAGS, strict=True), tool("get", DAYS, strict=True)])
    return text, examine(doctor, text)


def test_a_strict_tools_parameters_get_keyword_rows_and_a_witness(
    strict_report: tuple[str, DoctorReport],
) -> None:
    text, report = strict_report
    rows = {k.pointer: k for k in report.keywords}
    unique = rows[f"{PREFIX}/properties/tags/uniqueItems"]
    assert unique.status in (Status.IGNORED, Status.WEAKENED), unique
    # The line is the tools source's own, where the keyword is written.
    assert unique.line == locate(text, unique.pointer)[0]  # type: ignore[index]
    assert unique.line is not None and "uniqueItems" in text.splitlines()[unique.line - 1]
    assert rows[f"{PREFIX}/properties/tags/maxItems"].status is Status.ENFORCED
    assert rows["/tools/1/function/parameters/properties/days/maximum"].status is Status.ENFORCED
    repeated = [
        w for w in report.witnesses
        if f"{PREFIX}/properties/tags/uniqueItems" in w.pointers
    ]  # fmt: skip
    assert repeated, report.witnesses
    tags = json.loads(repeated[0].text)["tags"]  # an arguments document, as the leaf writes it
    assert len(tags) != len(set(tags))
    assert any("get_tags" in f.cause and "uniqueItems" in f.keywords for f in report.findings)


def test_the_backend_rows_come_from_the_tag(strict_report: tuple[str, DoctorReport]) -> None:
    _, report = strict_report
    assert _row(report, "xgrammar").verdict is Verdict.IGNORES
    vllm = _row(report, "vllm")
    assert vllm.verdict is Verdict.IGNORES
    said = " ".join(m.message for m in vllm.messages)
    assert "does not apply its unsupported-features check to structural tags" in said
    assert any(
        m.pointer == f"{PREFIX}/properties/tags/uniqueItems" and "in silence" in m.message
        for m in vllm.messages
    )
    llg = _row(report, "llguidance")
    assert llg.verdict is Verdict.REFUSES and "cannot mask" in llg.messages[0].message


def test_leaves_go_to_the_tool_their_tag_names() -> None:
    tag = {"type": "structural_tag", "format": {"type": "or", "elements": [
        {"type": "tag", "begin": '{"name": "get", "arguments": ', "content":
         {"type": "json_schema", "json_schema": True}, "end": "}"},
        {"type": "tag", "begin": '{"name": "get_tags", "arguments": ', "content":
         {"type": "json_schema", "json_schema": TAGS}, "end": "}"},
    ]}}  # fmt: skip
    leaves = tool_leaves(tag, [tool("get_tags", TAGS), tool("get", DAYS), tool("other", DAYS)])
    assert [(t.name, t.leaf and t.leaf["json_schema"]) for t in leaves] == [
        ("get_tags", TAGS), ("get", True), ("other", None),
    ]  # fmt: skip


def test_a_non_strict_tool_under_xgrammar_is_any_json(doctor: Doctor) -> None:
    report = examine(doctor, source([tool("get_tags", TAGS, strict=False)]))
    assert report.keywords and all(k.status is Status.IGNORED for k in report.keywords)
    assert all(k.pointer.startswith(PREFIX) and k.line is not None for k in report.keywords)
    assert all('"json_schema": true' in k.detail and "strict" in k.detail for k in report.keywords)
    assert not report.witnesses
    assert _row(report, "xgrammar").verdict is Verdict.IGNORES


@pytest.mark.parametrize(
    ("choice", "expected"),
    [("required", '"json_schema": true'), ("auto", "no tag")],
)
def test_vllm_hermes_with_a_tool_not_strict(doctor: Doctor, choice: str, expected: str) -> None:
    text = source([tool("get_tags", TAGS)], builder="vllm", format="hermes", tool_choice=choice)
    report = examine(doctor, text)
    assert report.keywords and all(k.status is Status.IGNORED for k in report.keywords)
    assert all(expected in k.detail for k in report.keywords), report.keywords
    assert _row(report, "vllm").verdict is Verdict.IGNORES


@pytest.fixture(scope="module")
def client(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    directory = tmp_path_factory.mktemp("doctor-tools")
    app: FastAPI = create_app(Settings(db_path=directory / "p.db", cache_dir=directory),
                              engine=engine)  # fmt: skip
    with TestClient(app) as test_client:
        yield as_page(test_client)


def test_the_web_answer_points_into_the_tools_source(client: TestClient) -> None:
    """Through a Doctor process (the tag crosses its pipe) and on the page's Doctor tab."""
    text = source([tool("get_tags", TAGS, strict=True)])
    grammar = {"kind": "tools", "source": text}
    response = client.post("/api/doctor", json={"grammar": grammar})  # the default safety stop
    assert response.status_code == 200, response.text
    answer = response.json()
    unique = next(k for k in answer["keywords"] if k["keyword"] == "uniqueItems")
    assert unique["pointer"] == f"{PREFIX}/properties/tags/uniqueItems"
    assert unique["status"] in ("ignored", "weakened")
    assert "uniqueItems" in text.splitlines()[unique["line"] - 1]
    assert any(unique["pointer"] in w["pointers"] for w in answer["witnesses"])
    form = {"kind": "tools", "source": text}
    page = client.post("/ui/doctor", data=form, headers={"HX-Request": "true"}).text
    assert f'{{"line": {unique["line"]}, "message": "uniqueItems ' in page  # marked in the editor
    assert "dropped in silence" in page


def test_a_structural_tags_leaves_are_examined_too(doctor: Doctor) -> None:
    tag = {"type": "structural_tag", "format": {"type": "tag", "begin": "<tags>",
           "content": {"type": "json_schema", "json_schema": TAGS}, "end": "</tags>"}}  # fmt: skip
    text = json.dumps(tag, indent=2)
    report = counted(doctor.examine(GrammarSpec(GrammarKind.STRUCTURAL_TAG, text)))
    unique = next(k for k in report.keywords if k.keyword == "uniqueItems")
    assert unique.pointer == "/format/content/json_schema/properties/tags/uniqueItems"
    assert unique.status in (Status.IGNORED, Status.WEAKENED)
    assert unique.line is not None and "uniqueItems" in text.splitlines()[unique.line - 1]
    assert any(unique.pointer in w.pointers for w in report.witnesses)
