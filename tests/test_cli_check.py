"""``python -m app check``: a whole suite checked on the real model's tokenizer, xgrammar and
llguidance; its exit status, formats, places, cache, shards and baseline."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from app.__main__ import main
from app.settings import Settings
from tests.vllm_oracle import STACK_PATHS, VLLM_PYTHON

pytestmark = pytest.mark.model

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "tests" / "fixtures" / "suite"
SARIF_SCHEMA = ROOT / "tests" / "fixtures" / "sarif" / "sarif-2.1.0-rtm.5.json"
BOTH = ["--engine", "xgrammar", "--engine", "llguidance"]
SOURCES = 26  # the files of the fixture suite that are sources (its .jsonl are not walked)
#: Sources checked under the vLLM stacks: a non-strict tool, GLM-4.7's array parameter, a pasted
#: request, a schema vLLM's xgrammar backend refuses.
STACK_SUITE = ROOT / "tests" / "fixtures" / "stack_suite"
STACKS = ("vllm-0.32.0", "vllm-0.34.0")
#: The first of these tests starts both stacks' runners and checks the suite under each.
STACK_TIMEOUT_S = 1500


@pytest.fixture(autouse=True)
def _one_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MASKSCOPE_COMPILE_WORKERS", "1")


def check(*args: str | Path, settings: Settings | None = None) -> int:
    return main(["check", *map(str, args)], settings=settings)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory, cache: Path) -> dict[str, Any]:
    """The fixture suite checked once (both engines), the cache filled for the other tests."""
    out = tmp_path_factory.mktemp("report") / "report.json"
    status = check(SUITE, *BOTH, "--format", "json", "--cache-dir", cache, "--output", out)
    data: dict[str, Any] = json.loads(out.read_text())
    data["status"] = status
    return data


def cases(report: dict[str, Any], engine: str = "xgrammar") -> dict[str, dict[str, Any]]:
    return {
        c["source"].removeprefix("tests/fixtures/suite/"): c
        for c in report["cases"]
        if c["engine"] == engine
    }


def levels(case: dict[str, Any]) -> list[str]:
    return [f["level"] for f in case["findings"]]


def run_again(cache: Path, tmp_path: Path, *args: str | Path) -> tuple[int, str]:
    out = tmp_path / "out"
    status = check(SUITE, *BOTH, "--cache-dir", cache, "--output", out, *args)
    return status, out.read_text()


def test_the_fixture_suite_fails_with_every_kind_of_finding(report: dict[str, Any]) -> None:
    assert report["status"] == 1
    assert report["summary"]["cases"] == 2 * SOURCES
    xgr = cases(report)
    assert levels(xgr["schemas/tags.json"]) == ["ignored"]
    assert levels(xgr["schemas/not.json"]) == ["weakened"]
    assert "over_restricted" in levels(xgr["schemas/open_object.json"])
    assert levels(xgr["tools/weather.tools.json"])[0] == "unconstrained"
    assert levels(xgr["schemas/broken.json"]) == ["compile_error"]
    assert levels(xgr["models/broken.py"]) == ["compile_error"]
    assert levels(xgr["grammars/bad.regex"]) == ["compile_error"]
    assert "test_failed" in levels(xgr["schemas/title.json"])
    assert xgr["schemas/person.json"]["tests"] == {"passed": 2, "failed": 0}
    assert levels(xgr["schemas/enum.json"]) == [] and xgr["schemas/enum.json"]["compiled"]
    llg = cases(report, "llguidance")
    assert levels(llg["schemas/tags.json"]) == ["compile_error"]  # llguidance refuses it
    assert llg["schemas/tags.json"]["findings"][0]["pointer"] == "/uniqueItems"
    assert levels(llg["schemas/person.json"]) == [] and llg["schemas/person.json"]["compiled"]


def _text_at(finding: dict[str, Any]) -> str:
    line = (ROOT / finding["file"]).read_text().splitlines()[finding["line"] - 1]
    return str(line[finding["column"] - 1 :])


def test_each_finding_is_at_its_keyword_in_the_file(report: dict[str, Any]) -> None:
    placed = [
        f for c in report["cases"] for f in c["findings"]
        if f["keyword"] and f["pointer"] and f["file"].endswith(".json")
    ]  # fmt: skip
    assert len(placed) >= 10
    for finding in placed:
        assert _text_at(finding).startswith(f'"{finding["keyword"]}"'), finding
    free = cases(report)["tools/weather.tools.json"]["findings"][0]
    assert _text_at(free).startswith('"parameters"') and free["line"] == 28
    broken = cases(report)["schemas/broken.json"]["findings"][0]
    assert (broken["line"], _text_at(broken)) == (4, "}")


def test_a_pydantic_finding_is_at_its_fields_line(report: dict[str, Any]) -> None:
    order = cases(report)["models/order.py"]["findings"]
    tags = next(f for f in order if f["pointer"] == "/properties/tags/uniqueItems")
    assert tags["level"] == "ignored" and _text_at(tags).startswith("tags: set[str]")
    qty = next(f for f in order if f["pointer"] == "/$defs/Line/properties/qty/type")
    assert _text_at(qty).startswith("qty: int")
    broken = cases(report)["models/broken.py"]["findings"][0]
    assert broken["line"] == 4 and broken["file"].endswith("models/broken.py")


def test_a_failed_test_is_at_its_line_in_the_tests_file(report: dict[str, Any]) -> None:
    failed = next(f for f in cases(report)["schemas/title.json"]["findings"]
                  if f["level"] == "test_failed")  # fmt: skip
    assert failed["file"].endswith("schemas/title.tests.jsonl") and failed["line"] == 3


def test_junit_has_a_case_per_source_stack_and_engine(cache: Path, tmp_path: Path) -> None:
    status, out = run_again(cache, tmp_path, "--format", "junit")
    assert status == 1
    tests = ET.fromstring(out).findall("./testsuite/testcase")
    assert len(tests) == 2 * SOURCES
    by = {(t.get("name", "").rsplit("/", 1)[-1], t.get("classname")): t for t in tests}
    tags = by[("tags.json", "maskscope.maskscope.xgrammar")].find("failure")
    assert (
        tags is not None and tags.get("type") == "ignored" and "/uniqueItems" in (tags.text or "")
    )
    assert by[("enum.json", "maskscope.maskscope.llguidance")].find("failure") is None


def test_sarif_is_valid_sarif_2_1_0_and_marks_the_keywords_line(
    cache: Path, tmp_path: Path
) -> None:
    status, out = run_again(cache, tmp_path, "--format", "sarif")
    log = json.loads(out)
    jsonschema.Draft4Validator(json.loads(SARIF_SCHEMA.read_text())).validate(log)
    results = log["runs"][0]["results"]
    tags = next(r for r in results if r["locations"][0]["physicalLocation"]["artifactLocation"]
                ["uri"].endswith("schemas/tags.json") and r["ruleId"] == "ignored")  # fmt: skip
    assert tags["locations"][0]["physicalLocation"]["region"] == {"startLine": 4, "startColumn": 3}
    assert tags["level"] == "error" and status == 1
    assert {r["level"] for r in results if r["ruleId"] == "over_restricted"} == {"warning"}


def test_github_annotations_name_the_file_line_and_column(cache: Path, tmp_path: Path) -> None:
    _, out = run_again(cache, tmp_path, "--format", "github")
    assert any(
        line.startswith("::error file=tests/fixtures/suite/schemas/tags.json,line=4,col=3,")
        for line in out.splitlines()
    )


def test_a_second_run_is_read_from_the_cache(
    report: dict[str, Any], cache: Path, tmp_path: Path
) -> None:
    status, out = run_again(cache, tmp_path, "--format", "json")
    again = json.loads(out)
    assert status == report["status"] and all(c["cached"] for c in again["cases"])
    assert [c["findings"] for c in again["cases"]] == [c["findings"] for c in report["cases"]]


def test_slow_compile_with_a_threshold_of_0_flags_every_compile(
    cache: Path, tmp_path: Path
) -> None:
    status, out = run_again(cache, tmp_path, "--format", "json", "--fail-on", "slow_compile",
                            "--slow-compile-ms", "0")  # fmt: skip
    data = json.loads(out)
    compiled = [c for c in data["cases"] if c["compiled"]]
    assert status == 1 and compiled
    assert all(levels(c).count("slow_compile") == 1 for c in compiled)
    assert all("slow_compile" not in levels(c) for c in data["cases"] if not c["compiled"])
    assert run_again(cache, tmp_path, "--fail-on", "slow_compile")[0] == 0


def test_shards_merged_equal_the_unsharded_run(
    report: dict[str, Any], cache: Path, tmp_path: Path
) -> None:
    shards = []
    for index in (1, 2, 3):
        status, out = run_again(cache, tmp_path, "--format", "json", "--shard", f"{index}/3")
        shards.append(tmp_path / f"shard{index}.json")
        shards[-1].write_text(out)
        assert json.loads(out)["shard"] == [index, 3]
    assert all(json.loads(s.read_text())["cases"] for s in shards)
    merged_at = tmp_path / "merged.json"
    assert check("merge", *shards, "--format", "json", "--output", merged_at) == 1
    merged = json.loads(merged_at.read_text())
    assert merged["cases"] == [c | {"cached": True} for c in report["cases"]]
    assert merged["summary"] == report["summary"]


def test_a_baseline_fails_only_on_a_newly_added_weakening(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("tags.json", "person.json", "person.tests.jsonl"):
        shutil.copy(SUITE / "schemas" / name, tmp_path / name)
    assert check(".", "--write-baseline", "--baseline", "base.json") == 0
    assert check(".", "--baseline", "base.json") == 0
    person = json.loads((tmp_path / "person.json").read_text())
    person["properties"]["name"]["not"] = {"const": "nobody"}
    (tmp_path / "person.json").write_text(json.dumps(person, indent=2))
    capsys.readouterr()
    assert check(".", "--baseline", "base.json", "--format", "json") == 1
    data = json.loads(capsys.readouterr().out)
    failing = [f for c in data["cases"] for f in c["findings"] if not f["baselined"]
               and f["level"] in data["fail_on"]]  # fmt: skip
    assert [(f["file"], f["pointer"], f["level"]) for f in failing] == [
        ("person.json", "/properties/name/not", "weakened")
    ]
    tags = next(c for c in data["cases"] if c["source"] == "tags.json")
    assert tags["cached"] and all(f["baselined"] for f in tags["findings"])


def test_a_jsonl_suite_points_at_its_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert check(SUITE / "lines" / "inline.jsonl", "--format", "json", "--cache-dir", tmp_path) == 1
    data = json.loads(capsys.readouterr().out)
    names = [c["source"].rsplit("#", 1)[1] for c in data["cases"]]
    assert names == ["colour.json", "digits.regex", "flag.json"]
    colour = data["cases"][0]
    assert colour["tests"] == {"passed": 1, "failed": 1}
    assert [(f["level"], f["line"]) for f in colour["findings"]] == [("test_failed", 2)]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--stack", "vllm"], "--stack vllm: unknown stack (one of maskscope, vllm-0.32.0"),
        (["--shard", "4/3"], "--shard"),
        (["--baseline", "missing.json"], "cannot read the baseline"),
    ],
)
def test_usage_errors_exit_2(
    args: list[str], says: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert check(SUITE / "grammars" / "phone.regex", "--cache-dir", tmp_path, *args) == 2
    assert says in capsys.readouterr().err


def test_a_path_that_names_nothing_and_a_bad_config_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert check(tmp_path / "nothing") == 2
    assert "no such file or directory" in capsys.readouterr().err
    monkeypatch.chdir(tmp_path)
    (tmp_path / "maskscope.toml").write_text('paths = ["."]\nengins = ["xgrammar"]\n')
    assert check() == 2
    assert "maskscope.toml: unknown key 'engins'" in capsys.readouterr().err


EXAMINED = ["schemas/tags.json", "schemas/not.json", "schemas/conditional.json",
            "schemas/open_object.json", "schemas/title.json", "tools/weather.tools.json",
            "tools/answer.tag.json", "models/order.py"]  # fmt: skip


@pytest.mark.parametrize("name", EXAMINED)
def test_check_says_what_the_doctor_and_the_tests_say(
    name: str, report: dict[str, Any], engine: Any, settings: Settings
) -> None:
    """Source by source: the keywords flagged, the causes of refused documents and the failed
    tests are the Doctor's and the test runner's own answers on that source alone."""
    from app.doctor import Doctor, PydanticSource, Status
    from app.engine import GrammarKind, GrammarSpec, presets
    from app.schematests import read_tests, run_tests

    path = SUITE / name
    kind = {".py": "pydantic", ".json": "json_schema"}[path.suffix]
    kind = (
        "tools" if name.endswith(".tools.json") else "structural_tag" if ".tag." in name else kind
    )
    text, pydantic = path.read_text(), None
    if kind == "pydantic":
        from app.sandbox.sandbox import Sandbox

        sandbox = Sandbox.from_settings(settings)
        derived = sandbox.schema(text)
        validate = lambda texts: sandbox.validate_many(path.read_text(), None, texts)  # noqa: E731
        pydantic, text = (
            PydanticSource(path.read_text(), derived.root, validate),
            json.dumps(derived.schema, indent=2),
        )
    grammar_kind = GrammarKind("json_schema" if kind == "pydantic" else kind)
    options = presets()["maskscope"] if grammar_kind is GrammarKind.JSON_SCHEMA else None
    spec = GrammarSpec(grammar_kind, text, options) if options else GrammarSpec(grammar_kind, text)
    doctor = Doctor.of(engine).examine(spec, seed=0, budget_ms=20_000, pydantic=pydantic)
    case = cases(report)[name]
    flagged = {(k.pointer, k.status.value) for k in doctor.keywords
               if k.status in (Status.IGNORED, Status.WEAKENED)}  # fmt: skip
    said = {(f["pointer"], f["level"]) for f in case["findings"]
            if f["level"] in ("ignored", "weakened") and f["keyword"]}  # fmt: skip
    free = [f["pointer"] for f in case["findings"] if f["level"] == "unconstrained"]
    assert said == {(p, s) for p, s in flagged if not any(p.startswith(u + "/") for u in free)}
    refused = [f.cause for f in doctor.findings if f.direction == "schema_accepts_grammar_refuses"]
    assert [f["message"] for f in case["findings"] if f["level"] == "over_restricted"] == refused
    tests_file = path.with_name(path.name.split(".")[0] + ".tests.jsonl")
    if tests_file.exists():
        results = run_tests(engine, engine.compile(spec), read_tests(tests_file.read_text()))
        assert case["tests"]["failed"] == sum(not r.passed for r in results)


@pytest.fixture(scope="module")
def stack_settings() -> Settings:
    """Both shipped stacks (their runners are the run's)."""
    assert VLLM_PYTHON.exists(), f"{VLLM_PYTHON} is missing: run `make vllm-install`"
    assert STACK_PATHS["vllm-0.34.0"][0].is_dir(), "vLLM 0.34.0 is missing: run `make stacks`"
    return Settings(
        vllm_python=VLLM_PYTHON,
        vllm_timeout_s=600,
        stacks_dir=STACK_PATHS["vllm-0.34.0"][0].parent,
        compile_workers=1,
    )


@pytest.fixture(scope="module")
def stack_report(
    stack_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """The stack suite checked once under both releases, on Qwen3.6's tokenizer."""
    out = tmp_path_factory.mktemp("stacks") / "report.json"
    stacks = [arg for stack in STACKS for arg in ("--stack", stack)]
    status = check(
        STACK_SUITE, *stacks, "--model", "qwen3.6", "--format", "json", "--no-cache",
        "--output", out, settings=stack_settings,
    )  # fmt: skip
    data: dict[str, Any] = json.loads(out.read_text())
    data["status"] = status
    return data


def by_stack(report: dict[str, Any], name: str) -> dict[str, dict[str, Any]]:
    return {c["stack"]: c for c in report["cases"] if c["source"].endswith(f"/{name}")}


@pytest.mark.server
@pytest.mark.timeout(STACK_TIMEOUT_S)
def test_a_non_strict_tool_is_unconstrained_by_each_release_s_own_tag(
    stack_report: dict[str, Any],
) -> None:
    assert stack_report["status"] == 1
    assert {c["stack"] for c in stack_report["cases"]} == set(STACKS)
    for stack, case in by_stack(stack_report, "free.tools.json").items():
        free = [f for f in case["findings"] if f["level"] == "unconstrained"]
        assert [f["pointer"] for f in free] == ["/tools/0/function/parameters"], stack
        assert "vLLM leaves the call unconstrained" in free[0]["message"]  # the release's reason
        assert _text_at(free[0]).startswith('"parameters"')


@pytest.mark.server
@pytest.mark.timeout(STACK_TIMEOUT_S)
def test_glm47_s_non_strict_array_parameter_differs_between_the_releases(
    stack_report: dict[str, Any],
) -> None:
    old, new = (by_stack(stack_report, "glm.tools.json")[stack] for stack in STACKS)
    assert old["compiled"] and new["compiled"]
    # 0.32.0 compiles the array as JSON, 0.34.0 keeps it raw text: two grammars, two verdicts
    assert old["size_bytes"] != new["size_bytes"]
    assert old["findings"] != new["findings"]


@pytest.mark.server
@pytest.mark.timeout(STACK_TIMEOUT_S)
def test_a_request_in_a_suite_is_derived_and_checked_under_each_stack(
    stack_report: dict[str, Any],
) -> None:
    for stack, case in by_stack(stack_report, "labels.request.json").items():
        assert case["kind"] == "request" and case["compiled"], stack
        weakened = [f for f in case["findings"] if f["level"] == "weakened" and f["keyword"]]
        assert [f["keyword"] for f in weakened] == ["not"], stack
        assert _text_at(weakened[0]).startswith('"not"')  # in the request file, at the keyword


@pytest.mark.server
@pytest.mark.timeout(STACK_TIMEOUT_S)
def test_a_schema_a_release_refuses_is_a_compile_error_with_its_message(
    stack_report: dict[str, Any],
) -> None:
    for stack, case in by_stack(stack_report, "both.json").items():
        assert not case["compiled"] and levels(case) == ["compile_error"], stack
        assert case["findings"][0]["message"].startswith(f"{stack}: vLLM refuses the request")


def test_an_unavailable_stack_exits_2_with_its_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere" / "bin" / "python"
    settings = Settings(stacks=[f"vllm-9.9.9=python:{missing}"], stack_runner_dir=tmp_path)
    assert (
        check(SUITE / "grammars" / "phone.regex", "--stack", "vllm-9.9.9", settings=settings) == 2
    )
    said = capsys.readouterr().err
    assert "--stack vllm-9.9.9: unavailable" in said and "bin/python is missing" in said
