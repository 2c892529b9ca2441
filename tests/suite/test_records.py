"""Baseline keys, shards and their merge, and the suite's config file: pure functions."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from app.exceptions import InvalidInput
from app.suite import Case, Finding, Level, SuiteReport
from app.suite.baseline import apply_baseline, read_baseline, write_baseline
from app.suite.config import find_config, load_config, read_config
from app.suite.discovery import Source
from app.suite.shard import in_shard, merge, parse_shard

WEAK = Finding(Level.WEAKENED, "not weakened", "/properties/a/not", "not", 4, 7, "a.json")


def case(source: str, *findings: Finding, engine: str = "xgrammar") -> Case:
    return Case(source, source, "json_schema", "maskscope", engine, True, 1.0, 10, findings)


def test_a_baseline_key_survives_moved_lines_and_new_witnesses() -> None:
    moved = dataclasses.replace(WEAK, line=40, column=1, witness="{}", message="reworded")
    assert WEAK.key(case("a.json")) == moved.key(case("a.json"))
    assert WEAK.key(case("a.json")) != WEAK.key(case("b.json"))
    assert WEAK.key(case("a.json")) != WEAK.key(case("a.json", engine="llguidance"))
    other = dataclasses.replace(WEAK, pointer="/properties/b/not")
    assert WEAK.key(case("a.json")) != other.key(case("a.json"))


def test_a_baseline_accepts_what_it_holds_and_nothing_new(tmp_path: Path) -> None:
    old = [case("a.json", WEAK)]
    assert write_baseline(tmp_path / "base.json", old) == 1
    new = dataclasses.replace(WEAK, pointer="/properties/b/not")
    checked = apply_baseline([case("a.json", WEAK, new)], read_baseline(tmp_path / "base.json"))
    report = SuiteReport(tuple(checked), (Level.WEAKENED,))
    assert [f.pointer for _, f in report.failing()] == ["/properties/b/not"]
    assert report.exit_status() == 1
    (tmp_path / "bad.json").write_text("[]")
    with pytest.raises(InvalidInput, match="not a baseline"):
        read_baseline(tmp_path / "bad.json")


def test_shards_split_the_suite_without_overlap() -> None:
    sources = [Source(f"s{i}.json", f"s{i}.json", "json_schema", "{}") for i in range(40)]
    shards = [in_shard(sources, (i, 4)) for i in range(1, 5)]
    assert sorted(s.name for shard in shards for s in shard) == sorted(s.name for s in sources)
    assert all(shards)
    assert in_shard(sources[:10], (2, 4)) == [s for s in shards[1] if s in sources[:10]]


@pytest.mark.parametrize("text", ["0/3", "4/3", "1-3", "a/b", "2"])
def test_a_bad_shard_is_refused(text: str) -> None:
    with pytest.raises(InvalidInput, match="--shard"):
        parse_shard(text)


def test_merged_shards_are_in_the_unsharded_order() -> None:
    a, b, c = (
        case(n, engine=e) for n, e in (("a", "xgrammar"), ("b", "xgrammar"), ("a", "llguidance"))
    )
    merged = merge([SuiteReport((b,), (Level.IGNORED,), (2, 2)),
                    SuiteReport((a, c), (Level.IGNORED,), (1, 2))])  # fmt: skip
    assert merged.cases == (a, c, b) and merged.shard is None
    with pytest.raises(InvalidInput, match="in two shards"):
        merge([SuiteReport((a,), ()), SuiteReport((a,), ())])
    with pytest.raises(InvalidInput, match="different --fail-on"):
        merge([SuiteReport((a,), ()), SuiteReport((b,), (Level.IGNORED,))])


def test_the_report_round_trips_through_json() -> None:
    report = SuiteReport((case("a.json", WEAK),), (Level.WEAKENED,), (1, 2))
    assert SuiteReport.from_dict(report.to_dict()) == report


def test_the_json_report_lists_each_sources_results_as_the_contract_does() -> None:
    free = Finding(Level.UNCONSTRAINED, "not strict", "/tools/0")
    broken = Finding(Level.COMPILE_ERROR, "does not parse")
    cases = (case("a.json", WEAK), case("a.json", engine="llguidance"),
             dataclasses.replace(case("t.tools.json", free), tests={"passed": 2, "failed": 1}),
             case("b.json", broken))  # fmt: skip
    sources = SuiteReport(cases, (Level.WEAKENED,)).to_dict()["sources"]
    assert [(s["path"], [r["engine"] for r in s["results"]]) for s in sources] == [
        ("a.json", ["xgrammar", "llguidance"]), ("t.tools.json", ["xgrammar"]),
        ("b.json", ["xgrammar"]),
    ]  # fmt: skip
    (weak,) = sources[0]["results"][0]["residue"]
    assert (weak["keyword"], weak["pointer"], weak["line"], weak["column"], weak["status"]) == (
        "not", "/properties/a/not", 4, 7, "weakened",
    )  # fmt: skip
    assert sources[0]["results"][1]["residue"] == []
    tools = sources[1]["results"][0]
    assert tools["unconstrained"] == ["/tools/0: not strict"]
    assert tools["tests"] == {"passed": 2, "failed": 1} and tools["residue"] == []
    assert sources[2]["results"][0]["residue"] == []  # a compile error is no residue


def test_the_config_is_maskscope_toml_or_pyproject(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.maskscope]\npaths = ["schemas"]\nfail-on = ["ignored"]\nslow-compile-ms = 5\n'
        "options = {any_whitespace = true}\n"
    )
    found = find_config(tmp_path)
    assert found is not None
    config = load_config(*found)
    assert config.paths == ("schemas",) and config.fail_on == (Level.IGNORED,)
    assert config.slow_compile_ms == 5.0 and config.options == {"any_whitespace": True}
    (tmp_path / "maskscope.toml").write_text('engines = ["llguidance"]\n')
    found = find_config(tmp_path)
    assert found is not None and load_config(*found).engines == ("llguidance",)


@pytest.mark.parametrize(
    ("toml", "says"),
    [
        ('fail-on = ["loud"]', "unknown level 'loud'"),
        ("jobs = true", "jobs has the wrong type"),
        ("options = {colour = 1}", "options takes"),
        ("engins = []", "unknown key 'engins'"),
    ],
)
def test_a_bad_config_names_the_file_and_key(tmp_path: Path, toml: str, says: str) -> None:
    (tmp_path / "maskscope.toml").write_text(toml + "\n")
    found = find_config(tmp_path)
    assert found is not None
    with pytest.raises(InvalidInput, match=says):
        load_config(*found)


def test_a_named_config_file_is_read_whatever_its_name(tmp_path: Path) -> None:
    (tmp_path / "ci.toml").write_text("jobs = 3\n")
    assert read_config(tmp_path / "ci.toml").jobs == 3
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    assert read_config(tmp_path / "pyproject.toml").paths == ()
    with pytest.raises(InvalidInput, match="no such file"):
        read_config(tmp_path / "none.toml")
