"""``POST /api/diff`` and ``python -m app diff`` (issue #40): one source under two real vLLM
releases, on the request model's tokenizer (Qwen3.6)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.cli.main import main
from app.engine import Engine
from app.main import create_app
from app.settings import Settings
from tests.engine.stacks.test_diff import CALL, GLM
from tests.engine.stacks.test_stack_builds import SEARCH
from tests.web.test_tokenizer_models import loaded

pytestmark = pytest.mark.server

STACKS = ["vllm-0.32.0", "vllm-0.34.0"]
#: GLM's tools source as the request a team sent to `vllm serve --tool-call-parser glm47`.
GLM_REQUEST = json.dumps(
    {
        "body": {"messages": [{"role": "user", "content": "find"}], "tools": [SEARCH],
                 "tool_choice": "required"},
        "serve": {"tool_call_parser": "glm47"},
    }
)  # fmt: skip


@pytest.fixture(scope="module")
def client(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = Settings(db_path=tmp_path_factory.mktemp("diff") / "p.db", compile_workers=1)
    with TestClient(create_app(settings, engine=engine)) as test_client:
        loaded(test_client, "qwen3.6")
        yield test_client


def _diff(client: TestClient, **fields: Any) -> Any:
    body = {"grammar": {"kind": "tools", "source": GLM}, "model": "qwen3.6", "stacks": STACKS}
    return client.post("/api/diff", json=body | fields)


def test_the_diff_names_the_pointer_and_the_first_step_whose_masks_differ(
    client: TestClient,
) -> None:
    answer = _diff(client, text=CALL)
    assert answer.status_code == 200, answer.text
    diff = answer.json()
    assert diff["stacks"] == STACKS
    assert any(d["pointer"].endswith("/type") and d["a"] == "json_schema" for d in diff["tag_diff"])
    assert diff["grammar_diff"].startswith("--- vllm-0.32.0\n+++ vllm-0.34.0\n")
    first = diff["steps"][0]  # the token closing ``<arg_value>`` (see tests/engine/stacks)
    assert diff["first_step"] == first["index"] and first["token"].endswith(">")
    assert set(first) == {"index", "token_id", "token", "only_a", "only_b"}
    assert first["only_b"]["count"] > 0 and first["only_b"]["examples"]
    old, new = diff["walks"]
    assert old["stack"] == "vllm-0.32.0" and old["refused_at"] is not None and not old["accepted"]
    assert new["accepted"] and new["mask_by"]["stack"] == "vllm-0.34.0"


def test_the_doctor_diff_names_the_rows_that_change_between_the_releases(
    client: TestClient,
) -> None:
    """Each release's tag examined by the Doctor (in its workers): 0.32.0 compiles ``paths`` as
    a JSON array, whose ``type`` its grammar enforces; 0.34.0 keeps the value as raw text, so
    nothing in it is checked. What both find alike (``query``, raw text under both) is left
    out."""
    answer = _diff(client)
    assert answer.status_code == 200, answer.text
    changes = answer.json()["doctor_diff"]
    assert changes, "the Doctor finds the same under both releases"
    paths = "/tools/0/function/parameters/properties/paths"
    keywords = {c["pointer"]: c for c in changes if c["kind"] == "keyword"}
    kind = keywords[f"{paths}/type"]
    assert kind["keyword"] == "type" and kind["a"]["status"] == "enforced"
    assert kind["b"]["status"] == "ignored" and "raw text" in kind["b"]["detail"]
    assert not [p for p in keywords if "/properties/query" in p]  # raw text under both
    (xgrammar,) = [c for c in changes if c["kind"] == "backend" and c["backend"] == "xgrammar"]
    said_b = [m["message"] for m in xgrammar["b"]["messages"]]
    assert any("paths: raw text" in m for m in said_b), xgrammar
    assert not any("query" in m["message"] for m in xgrammar["a"]["messages"])
    assert all(set(c) >= {"kind", "a", "b"} for c in changes)


def test_a_schema_is_examined_as_each_release_s_backend_compiles_it(client: TestClient) -> None:
    """A JSON Schema: each side is the grammar the release's xgrammar backend compiles, with the
    options it passed; both releases enforce ``maximum`` alike, so nothing differs, and the
    diff says so (``[]``: examined, not null)."""
    days = {"type": "object", "properties": {"days": {"type": "integer", "maximum": 7}},
            "required": ["days"]}  # fmt: skip
    answer = _diff(client, grammar={"kind": "json_schema", "source": json.dumps(days)})
    assert answer.status_code == 200, answer.text
    assert answer.json()["doctor_diff"] == []


def test_a_hostile_grammar_is_examined_in_the_doctors_workers_never_the_server(
    client: TestClient,
) -> None:
    """xgrammar's jump-forward search on this grammar never returns and grows without bound: a
    Doctor worker is cut off at its memory cap, each side says it could not be examined, and
    the server answers."""
    loop = {"kind": "ebnf", "source": 'root ::= "a" root\n'}
    answer = _diff(client, grammar=loop)
    assert answer.status_code == 200, answer.text
    (examination,) = answer.json()["doctor_diff"]
    assert examination["kind"] == "examination", examination
    for side in (examination["a"], examination["b"]):
        assert side["code"] in ("grammar_too_complex", "cut_short_by_load"), side


def test_a_pasted_request_is_derived_by_each_release_before_the_two_are_compared(
    client: TestClient,
) -> None:
    grammar = {"kind": "request", "source": GLM_REQUEST}
    answer = _diff(client, grammar=grammar, text=CALL)
    assert answer.status_code == 200, answer.text
    diff = answer.json()
    # 0.34.0's own builder keeps the array as raw text, where 0.32.0's compiles it as JSON
    assert any(d["pointer"].endswith("/type") and d["a"] == "json_schema" for d in diff["tag_diff"])
    assert diff["first_step"] is not None


def test_no_walk_still_compares_the_tags_and_grammars(client: TestClient) -> None:
    diff = _diff(client).json()
    assert diff["tag_diff"] and diff["steps"] == [] and diff["first_step"] is None


def test_an_unknown_stack_is_named_by_its_pointer(client: TestClient) -> None:
    answer = _diff(client, stacks=["vllm-0.32.0", "vllm-9.9.9"])
    assert answer.status_code == 422
    error = answer.json()["error"]
    assert error["pointer"] == "/stacks/1" and "unknown stack 'vllm-9.9.9'" in error["message"]
    assert _diff(client, stacks=["vllm-0.32.0"]).status_code == 422


def test_the_command_line_prints_the_first_step_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "glm.tools.json"
    source.write_text(GLM)
    command = ["diff", "--stack", STACKS[0], "--stack", STACKS[1], "--schema", str(source),
               "--kind", "tools", "--model", "qwen3.6", "--text", CALL]  # fmt: skip
    assert main(command) == 1
    out = capsys.readouterr().out
    assert "A = vllm-0.32.0, B = vllm-0.34.0" in out and "the tags differ at" in out
    assert "first step whose masks differ: " in out
    # the Doctor's rows, as POST /api/diff's doctor_diff (0.34.0 keeps the array as raw text)
    paths = "/tools/0/function/parameters/properties/paths"
    (row,) = [line for line in out.splitlines() if f"pointer={paths}/type" in line]
    assert row.lstrip().startswith("keyword ") and '"enforced"' in row and '"ignored"' in row
    assert main([*command, "--json", "--no-doctor"]) == 1
    answer = json.loads(capsys.readouterr().out)
    assert answer["first_step"] is not None and answer["doctor_diff"] is None
    assert main(["diff", "--stack", STACKS[0], "--schema", str(source), "--kind", "tools"]) == 2


def test_the_command_line_derives_a_pasted_request_under_each_stack(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "glm.request.json"
    source.write_text(GLM_REQUEST)
    command = ["diff", "--stack", STACKS[0], "--stack", STACKS[1], "--schema", str(source),
               "--kind", "request", "--model", "qwen3.6", "--text", CALL,
               "--no-doctor"]  # fmt: skip
    assert main(command) == 1
    out = capsys.readouterr().out
    assert "the tags differ at" in out and "the Doctor" not in out
