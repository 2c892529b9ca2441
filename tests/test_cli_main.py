"""``python -m app``'s wiring: one Settings a run, passed down; the grammar flags built into the
same request models the API validates; the flags and help of every command as they were."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.cli.main import main, parser
from app.cli.options import grammar_request
from app.settings import Settings
from app.web.schemas.bodies import GrammarIn
from tests.engine.model.remote.conftest import spec_for

ROOT = Path(__file__).resolve().parent.parent
ROUTER = ROOT / "schemas" / "router.py"
NESTED = ROOT / "schemas" / "nested.json"
HELP = ROOT / "tests" / "fixtures" / "cli_help.txt"


def test_settings_are_built_once_per_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Pydantic source (the sandbox's settings) on a model that is not there (the engine's):
    both read the one Settings built for the run."""
    built: list[Settings] = []
    init = Settings.__init__

    def counted(self: Settings, **values: Any) -> None:
        init(self, **values)
        built.append(self)

    monkeypatch.setattr(Settings, "__init__", counted)
    assert main(["replay", "--schema", str(ROUTER), "--text", "{}", "--model", "nope"]) == 2
    assert "no remote engine 'nope'" in capsys.readouterr().err
    assert len(built) == 1


def test_the_settings_given_are_the_ones_used(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Settings passed to ``main`` reach the engine: their remote engine is the one tried."""
    down = spec_for("http://127.0.0.1:9/v1", id="down")
    settings = Settings(cache_dir=tmp_path, remote_engines=[down])
    argv = ["replay", "--schema", str(NESTED), "--text", "{}", "--model", "down"]
    assert main(argv, settings=settings) == 2
    err = capsys.readouterr().err
    assert "remote engine 'down'" in err and "no remote engine" not in err


@pytest.mark.parametrize(
    ("flags", "options", "engine"),
    [
        ([], {}, "xgrammar"),
        (["--preset", "vllm", "--indent", "2"], {"preset": "vllm", "indent": 2}, "xgrammar"),
        (
            ["--any-whitespace", "--no-strict", "--separators", ",", ":"],
            {"any_whitespace": True, "strict_mode": False, "separators": (",", ":")},
            "xgrammar",
        ),
        (
            ["--preset", "sglang", "--max-whitespace", "3", "--engine", "llguidance"],
            {"preset": "sglang", "max_whitespace_cnt": 3},
            "llguidance",
        ),
    ],
)
def test_the_grammar_flags_make_the_apis_request(
    flags: list[str], options: dict[str, Any], engine: str
) -> None:
    """The command line's grammar is the one ``POST /api/compile`` builds of the same fields."""
    args = parser().parse_args(["replay", "--schema", str(NESTED), "--text", "{}", *flags])
    source = NESTED.read_text(encoding="utf-8")
    fields = {"kind": "json_schema", "source": source, "options": options, "engine": engine}
    api = GrammarIn.model_validate(fields)
    request = grammar_request(args, Settings())
    assert request.spec == api.to_spec()
    assert request.pydantic is None and request.validate is None


def test_a_pydantic_source_resolves_through_the_sandbox() -> None:
    """The derived schema is compiled; the Doctor and the trace validate with the model itself."""
    args = parser().parse_args(["doctor", "--schema", str(ROUTER)])
    request = grammar_request(args, Settings())
    assert request.spec.kind.value == "json_schema"
    assert json.loads(request.spec.source)["type"] == "object"
    assert request.pydantic is not None and request.pydantic.source == ROUTER.read_text()
    assert request.validate is not None
    assert not request.validate("{}").valid


@pytest.mark.parametrize(
    "command", [[], ["serve"], ["trace"], ["replay"], ["doctor"], ["test"], ["store"]]
)
def test_every_commands_help_is_as_it_was(
    command: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The help of dc011d5's ``app/__main__.py``, flag for flag (tests/fixtures/cli_help.txt)."""
    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit) as exited:
        main([*command, "--help"])
    assert exited.value.code == 0
    sections = HELP.read_text(encoding="utf-8").split("\n=== ")
    expected = {s.split("\n", 1)[0].strip("= "): s.split("\n", 1)[1] for s in sections}
    assert capsys.readouterr().out == expected[" ".join(["python -m app", *command])]
