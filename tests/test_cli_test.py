"""``python -m app test``: a schema's unit tests in CI, exit 0 when all pass, 1 otherwise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.__main__ import main

# The commands load the real model in this process: the model tier (docs/testing.md)
pytestmark = pytest.mark.model

ROOT = Path(__file__).resolve().parent.parent
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
    },
    "required": ["name"],
}


@pytest.fixture(autouse=True)
def _one_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MASKSCOPE_COMPILE_WORKERS", "1")


def _files(tmp_path: Path, *tests: tuple[str, str]) -> list[str]:
    schema, lines = tmp_path / "person.json", tmp_path / "person.tests.jsonl"
    schema.write_text(json.dumps(PERSON))
    lines.write_text("\n".join(json.dumps({"text": t, "expect": e}) for t, e in tests) + "\n\n")
    return ["test", "--schema", str(schema), "--tests", str(lines)]


def test_all_tests_passing_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = _files(tmp_path, ('{"tags":["a"],"name":"Ada"}', "pass"), ('{"tags": []}', "fail"))
    assert main(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("PASS   0  expect pass  grammar accepts")
    assert out[0].endswith('"{\\"name\\": \\"Ada\\", \\"tags\\": [\\"a\\"]}"')
    assert out[1].startswith("PASS   1  expect fail  grammar refuses at offset 2")
    assert out[2] == "2 passed, 0 failed, 0 disagree"


def test_a_failed_test_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = _files(tmp_path, ('{"name": "Ada", "tags": ["a", "a"]}', "fail"))
    assert main([*args, "--json"]) == 1
    result, summary = (json.loads(line) for line in capsys.readouterr().out.splitlines())
    assert result["index"] == 0 and result["text"] == '{"name": "Ada", "tags": ["a", "a"]}'
    assert result["passed"] is False and result["disagree"] is True
    assert result["grammar"]["accepted"] and not result["schema"]["valid"]
    assert summary == {"passed": 0, "failed": 1, "disagree": 1}


def test_a_malformed_tests_file_exits_2_with_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = _files(tmp_path, ("{}", "pass"))
    Path(args[-1]).write_text('{"text": "{}", "expect": "pass"}\n{"text": "{}", "expect": "ok"}\n')
    assert main(args) == 2
    assert capsys.readouterr().err == (
        'error: expect must be "pass" or "fail", not \'ok\' (line 2, pointer /expect)\n'
    )
