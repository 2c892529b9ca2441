"""A Pydantic source reaches a snippet only as the sandbox ran it; the snippets still run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from app.engine import Engine
from app.export import PydanticSource, Sampling, export
from app.export.escape import py
from app.settings import EMBEDDED_HF_ID
from tests.export.conftest import (
    ANSWER,
    PRICING,
    STRIPPED_NOTE,
    Capture,
    checkpoint,
    make_request,
    run,
    run_until,
    spec_of,
    unwrapped,
    validated_pricing,
)

PYDANTIC = PRICING.source(".py")
PARSED = "offer_code='ABCD12'"  # in the parsed PricingDecision the OpenAI snippet prints


def _run_openai(code: str, capture: Capture, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Run the OpenAI snippet against the capture server; the body it sent."""
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_BASE_URL", capture.url + "/v1")
    run(code)
    path, sent = capture.body()
    assert path == "/v1/chat/completions"
    return sent


def _served(live_server: str, target: str, body: dict[str, Any]) -> str:
    url = f"{live_server}/api/export"
    response = httpx.post(url, params={"target": target}, json=body, timeout=120)
    assert response.status_code == 200, response.text
    code: str = response.json()["code"]
    return code


def test_the_exported_snippets_run_without_running_the_removed_validator(
    live_server: str,
    engine: Engine,
    capture: Capture,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    marker = tmp_path / "pwned"
    grammar = {"kind": "pydantic", "source": validated_pricing(marker)}
    body = {"grammar": grammar, "messages": [{"role": "user", "content": "Decide."}]}
    openai = _served(live_server, "openai", body)
    sent = _run_openai(openai, capture, monkeypatch)
    assert not marker.exists()
    assert STRIPPED_NOTE in unwrapped(openai)
    assert sent["response_format"]["json_schema"]["name"] == "PricingDecision"  # parse's schema
    assert PARSED in capsys.readouterr().out
    xgrammar = _served(live_server, "xgrammar", body)
    local = f"MODEL = {py(checkpoint(engine))}"  # the hub id's files, as the engine loaded them
    xgrammar = xgrammar.replace(f"MODEL = {py(EMBEDDED_HF_ID)}", local)
    assert local in xgrammar
    compiled = run_until(xgrammar, "compiled")
    assert not marker.exists()
    shown = httpx.post(f"{live_server}/api/compile", json=grammar, timeout=120)
    assert shown.status_code == 200, shown.text
    assert str(compiled.grammar) == shown.json()["grammar"]


def test_a_future_import_opens_the_snippet_so_the_model_still_runs(
    engine: Engine,
    capture: Capture,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    future = PYDANTIC.replace(
        "\n\nfrom typing import", "\n\nfrom __future__ import annotations\nfrom typing import", 1
    )
    assert future != PYDANTIC
    req = make_request(engine, pydantic=PydanticSource(future, "PricingDecision"))
    plain = make_request(engine, pydantic=PydanticSource(PYDANTIC, "PricingDecision"))
    code = export(req, "xgrammar").code
    assert "class PricingDecision(BaseModel):" in code
    compiled = run_until(code, "compiled")
    expected = run_until(export(plain, "xgrammar").code, "compiled")
    assert str(compiled.grammar) == str(expected.grammar)
    _run_openai(export(req, "openai").code, capture, monkeypatch)
    assert PARSED in capsys.readouterr().out


@pytest.mark.parametrize(
    ("char", "shown"),
    [("\x7f", "U+007F"), ("\u202e", "U+202E"), ("\u2028", "U+2028"), ("\x1b", "U+001B")],
)
def test_a_character_that_would_act_when_pasted_keeps_the_source_out(
    engine: Engine, char: str, shown: str
) -> None:
    source = PYDANTIC.replace('"The message to the customer."', f'"The message{char}"')
    assert source != PYDANTIC
    line = source[: source.index(char)].count("\n") + 1
    req = make_request(engine, pydantic=PydanticSource(source, "PricingDecision"))
    for target in ("xgrammar", "openai"):
        code = export(req, target).code
        assert char not in code and "class PricingDecision" not in code, target
        assert f"the source holds {shown} at line {line}, which would not show" in unwrapped(code)
    compiled = run_until(export(req, "xgrammar").code, "compiled")
    assert str(compiled.grammar) == engine.compile(spec_of(req)).grammar_text


def test_a_source_that_rebinds_print_is_not_written_into_the_openai_snippet(
    engine: Engine,
    capture: Capture,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    source = PYDANTIC + "\nfrom typing import get_type_hints as print\n"
    req = make_request(engine, pydantic=PydanticSource(source, "PricingDecision"))
    code = export(req, "openai").code
    assert "get_type_hints" not in code
    assert "instead of defining the model: the source binds names the snippet uses: print" in (
        unwrapped(code)
    )
    sent = _run_openai(code, capture, monkeypatch)
    assert sent["response_format"]["json_schema"]["schema"] == req.schema  # the schema, strict
    assert capsys.readouterr().out.strip() == ANSWER


@pytest.mark.parametrize(
    ("extra", "root", "seed", "clashes"),
    [
        ("", "PricingDecision", None, None),
        ("from typing import Any as xgr\n", "PricingDecision", None, "xgr"),
        ("import typing as torch\n", "PricingDecision", None, None),  # no seed: no torch
        ("import typing as torch\n", "PricingDecision", 7, "torch"),
        ("MODEL = PricingDecision\n", "MODEL", None, "MODEL"),  # the snippet rebinds its root
        ("print = PricingDecision\n", "print", None, "print"),  # and reads it for another use
        ("tokenizer = int\ncompiled = str\n", "PricingDecision", None, "compiled, tokenizer"),
    ],
)
def test_the_xgrammar_snippet_defines_the_model_unless_a_name_clashes(
    engine: Engine, extra: str, root: str, seed: int | None, clashes: str | None
) -> None:
    sampling = Sampling() if seed is None else Sampling(0.5, 1.0, seed)
    source = PYDANTIC + extra
    req = make_request(engine, pydantic=PydanticSource(source, root), sampling=sampling)
    code = export(req, "xgrammar").code
    compiled = run_until(code, "compiled")
    if clashes is None:
        assert code.count(source.strip("\n")) == 1
        assert f"compile_json_schema(\n    {root}," in code
    else:
        assert "class PricingDecision" not in code and "compile_json_schema(\n    SCHEMA," in code
        assert f"the source binds names the snippet uses: {clashes}." in unwrapped(code)
        assert str(compiled.grammar) == engine.compile(spec_of(req)).grammar_text


def test_a_source_with_windows_line_ends_is_written_with_the_snippets_own(engine: Engine) -> None:
    windows = PYDANTIC.replace("\n", "\r\n")  # what a browser's form sends from a textarea
    wrong = make_request(engine, pydantic=PydanticSource(windows, "Root"))
    assert "the source does not define Root at its top level" in unwrapped(
        export(wrong, "xgrammar").code
    )
    req = make_request(engine, pydantic=PydanticSource(windows, "PricingDecision"))
    plain = make_request(engine, pydantic=PydanticSource(PYDANTIC, "PricingDecision"))
    code = export(req, "xgrammar").code
    assert "\r" not in code and code == export(plain, "xgrammar").code
    assert code.count(PYDANTIC.strip("\n")) == 1
