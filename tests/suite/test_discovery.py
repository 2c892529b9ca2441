"""A suite's sources: kinds by the longest suffix, tests beside them, globs and JSONL suites."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.exceptions import InvalidInput
from app.suite.discovery import discover
from app.suite.kinds import kind_of


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("a.json", "json_schema"),
        ("a.tools.json", "tools"),
        ("A.TOOLS.JSON", "tools"),
        ("a.tag.json", "structural_tag"),
        ("m.py", "pydantic"),
        ("g.ebnf", "ebnf"),
        ("r.regex", "regex"),
        ("notes.txt", None),
        ("a.tests.jsonl", None),
    ],
)
def test_the_longest_suffix_decides_the_kind(name: str, kind: str | None) -> None:
    found = kind_of(name)
    assert (found[0] if found else None) == kind


def test_a_directory_is_walked_with_each_sources_tests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    (tmp_path / ".hidden").mkdir()
    (tmp_path / "sub" / "b.tools.json").write_text("{}")
    (tmp_path / "a.json").write_text("{}")
    (tmp_path / "a.tests.jsonl").write_text('{"text": "{}", "expect": "pass"}\n')
    (tmp_path / "README.md").write_text("not a source")
    (tmp_path / "suite.jsonl").write_text("")  # a JSONL is a suite only when named
    (tmp_path / ".hidden" / "c.json").write_text("{}")
    found = discover(["."])
    assert [(s.name, s.kind, s.tests_path) for s in found] == [
        ("a.json", "json_schema", "a.tests.jsonl"),
        ("sub/b.tools.json", "tools", None),
    ]
    assert [s.name for s in discover(["**/*.json", "a.json"])] == ["a.json", "sub/b.tools.json"]


def test_a_jsonl_suite_gives_a_source_a_line(tmp_path: Path) -> None:
    lines = [
        {
            "name": "x.json",
            "source": {"type": "string"},
            "tests": [{"text": '"a"', "expect": "pass"}],
        },
        {"name": "y", "kind": "regex", "source": "[0-9]"},
    ]
    suite = tmp_path / "suite.jsonl"
    suite.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n")
    x, y = discover([str(suite)])
    assert (x.kind, x.line, json.loads(x.text or "")) == ("json_schema", 1, {"type": "string"})
    assert x.tests is not None and json.loads(x.tests)["expect"] == "pass"
    assert (y.kind, y.line, y.text, y.name.endswith("suite.jsonl#y")) == ("regex", 2, "[0-9]", True)


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ('{"name": "x.json"', "suite.jsonl:1: not JSON"),
        ('{"name": "x.txt", "source": "a"}', "needs a source and a kind"),
        ("[1]", "a suite line is"),
    ],
)
def test_a_bad_jsonl_line_is_named(tmp_path: Path, content: str, says: str) -> None:
    (tmp_path / "suite.jsonl").write_text(content)
    with pytest.raises(InvalidInput, match=says) as raised:
        discover([str(tmp_path / "suite.jsonl")])
    assert raised.value.line == 1


def test_paths_that_name_nothing_are_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("")
    for path, says in ((tmp_path / "none", "no such file"), (tmp_path / "*.json", "matches no"),
                       (tmp_path / "notes.txt", "no source kind")):  # fmt: skip
        with pytest.raises(InvalidInput, match=says):
            discover([str(path)])


def test_a_file_that_is_not_utf8_is_a_source_with_its_error(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_bytes(b'{"a": "\xff"}')
    (source,) = discover([str(tmp_path)])
    assert source.text is None and source.error == "not UTF-8 text: byte 7"
