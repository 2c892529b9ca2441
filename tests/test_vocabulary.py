"""One vocabulary: kinds, libraries, presets and caps are read from app.vocabulary and app.caps
by the request models (hence OpenAPI), the settings, the CLI and the templates."""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path
from typing import Any

import pytest
from jinja2 import Environment, FileSystemLoader
from pydantic import ValidationError

from app import caps
from app.__main__ import main
from app.engine import presets
from app.main import create_app
from app.settings import Settings
from app.vocabulary import MaskingLibrary, Preset, SourceKind
from app.web.schemas.bodies import ActionIn, CountIn
from app.web.ui import render

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"


def _values(enum: type[StrEnum]) -> list[str]:
    return [member.value for member in enum]


@pytest.fixture(scope="module")
def openapi(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("vocabulary")
    app = create_app(Settings(db_path=tmp / "permalinks.db", cache_dir=tmp))
    document: dict[str, Any] = app.openapi()
    return document


def _property(openapi: dict[str, Any], model: str, name: str) -> dict[str, Any]:
    schema: dict[str, Any] = openapi["components"]["schemas"][model]["properties"][name]
    return schema


@pytest.mark.parametrize("library", list(MaskingLibrary))
def test_every_preset_has_options_for_every_library(library: MaskingLibrary) -> None:
    assert list(presets(library)) == _values(Preset)


@pytest.mark.parametrize(
    ("model", "name", "enum"),
    [
        ("GrammarIn", "kind", SourceKind),
        ("GrammarIn", "engine", MaskingLibrary),
        ("OptionsIn", "preset", Preset),
    ],
)
def test_the_api_lists_the_vocabulary(
    openapi: dict[str, Any], model: str, name: str, enum: type[StrEnum]
) -> None:
    schema = _property(openapi, model, name)
    assert schema["type"] == "string"  # inline, as before: no $ref to an enum component
    assert schema["enum"] == _values(enum)


@pytest.mark.parametrize(
    ("model", "name", "cap"),
    [
        ("ActionIn", "n", caps.MAX_STEP_COUNT),
        ("CountIn", "n", caps.MAX_STEP_COUNT),
        ("SessionIn", "max_tokens", caps.MAX_TOKENS),
        ("SessionIn", "top_k", caps.MAX_TOP_K),
    ],
)
def test_the_api_states_the_caps(openapi: dict[str, Any], model: str, name: str, cap: int) -> None:
    assert _property(openapi, model, name)["maximum"] == cap


def test_a_trace_action_takes_as_many_steps_as_a_step_call() -> None:
    # The contract's `n` <= 512, for a permalink's actions as for POST .../step.
    assert ActionIn(op="step", n=caps.MAX_STEP_COUNT).n == CountIn(n=caps.MAX_STEP_COUNT).n
    for model in (ActionIn, CountIn):
        with pytest.raises(ValidationError, match="less than or equal to 512"):
            model.model_validate({"op": "step", "n": 513} if model is ActionIn else {"n": 513})


def test_the_event_stream_resumes_within_the_token_cap(openapi: dict[str, Any]) -> None:
    events = openapi["paths"]["/api/sessions/{session_id}/events"]["get"]
    after = next(p for p in events["parameters"] if p["name"] == "after")
    assert after["schema"]["maximum"] == caps.MAX_TOKENS


@pytest.mark.parametrize(
    ("name", "cap"),
    [
        ("max_tokens_cap", caps.MAX_TOKENS),
        ("source_max_bytes", caps.MAX_SOURCE_BYTES),
        ("messages_max_bytes", caps.MAX_MESSAGES_BYTES),
        ("top_k", caps.MAX_TOP_K),
        ("replay_max_tokens", caps.MAX_REPLAY_TOKENS),
    ],
)
def test_settings_may_lower_a_cap_not_raise_it(name: str, cap: int) -> None:
    assert getattr(Settings.model_validate({name: cap}), name) == cap
    with pytest.raises(ValidationError, match=name):
        Settings.model_validate({name: cap + 1})


@pytest.mark.parametrize(
    ("option", "enum"),
    [("--kind", SourceKind), ("--preset", Preset), ("--engine", MaskingLibrary)],
)
def test_the_cli_offers_the_vocabulary(
    option: str, enum: type[StrEnum], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["replay", "--schema", "x.json", "--text", "{}", option, "nonsense"])
    assert exited.value.code == 2
    listed = re.search(r"\(choose from (.*)\)", capsys.readouterr().err)
    assert listed is not None
    assert re.findall(r"'([^']*)'", listed.group(1)) == _values(enum)


@pytest.fixture(scope="module")
def env() -> Environment:
    environment = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=True)
    render.install(environment)
    return environment


def test_the_engine_picker_lists_the_libraries(env: Environment) -> None:
    html = env.get_template("partials/_engines.html").render(
        prefill={"engine": "llguidance", "compare": False}, llguidance_presets={}
    )
    options = re.findall(r'<option value="([^"]*)"( selected)?>', html)
    assert options == [("xgrammar", ""), ("llguidance", " selected")]
    assert [value for value, _ in options] == _values(MaskingLibrary)


def test_the_page_names_presets_by_their_labels(env: Environment) -> None:
    assert env.globals["preset_labels"] == {
        "maskscope": "Maskscope (compact JSON)",
        "xgrammar": "xgrammar defaults",
        "vllm": "vLLM default",
        "sglang": "SGLang default",
    }
    assert env.globals["source_kinds"] == {
        "json_schema": "JSON",
        "pydantic": "Pydantic",
        "ebnf": "EBNF",
        "regex": "Regex",
        "structural_tag": "Structural tag",
        "tools": "Tools",
    }
