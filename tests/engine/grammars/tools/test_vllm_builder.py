"""The vLLM tools builder against vLLM's own code, which is the oracle.

Every expected tag comes from ``vllm_oracle.py`` run in .venv-vllm (vLLM called the obvious way),
on the production tokenizers and the default model's: several parsers, each tool choice, strict
and non-strict tools, parallel calls on and off, reasoning on and off. One builder (one runner
process) and one oracle run serve the whole module.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
import xgrammar as xgr
from transformers import AutoTokenizer

from app.engine.grammars.tools.base import ToolsBuild, ToolsRequest
from app.engine.grammars.tools.vllm_builder import VllmBuilder
from app.engine.model.loading import checkpoint_source
from app.engine.model.shipped_tokenizers import tokenizer_dir
from app.exceptions import GrammarError, GrammarTooComplex
from app.settings import Settings
from tests.vllm_server import VLLM

# vLLM's tools runner: a real process serving requests (tests/tiers.py)
pytestmark = pytest.mark.server

VLLM_PYTHON = VLLM.parent / "python"
ORACLE = Path(__file__).resolve().with_name("vllm_oracle.py")

WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
            "required": ["city"],
        },
    },
}
SEARCH: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "search",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["query"],
        },
    },
}
#: Each parser, with vLLM's reasoning parser its models are served with.
PARSERS = {
    "hermes": "qwen3",
    "qwen3_coder": "qwen3",
    "deepseek_v4": "deepseek_v4",
    "glm47": "glm47",
    "kimi_k2": "kimi_k2",
    "minimax_m2": "minimax_m2",
    "pythonic": None,
}
CHOICES: list[Any] = [
    "none",
    "auto",
    "required",
    {"type": "function", "function": {"name": "search"}},
]


def tools(strict: bool) -> tuple[dict[str, Any], ...]:
    if not strict:
        return (WEATHER, SEARCH)
    return tuple({**t, "function": {**t["function"], "strict": True}} for t in (WEATHER, SEARCH))


def grid() -> Iterator[ToolsRequest]:
    """Every combination the oracle is asked about, for one tokenizer."""
    for fmt, reasoning_parser in PARSERS.items():
        reasonings: list[tuple[str | None, str]] = [(None, "auto")]
        if reasoning_parser is not None:
            reasonings += [(reasoning_parser, "enabled"), (reasoning_parser, "disabled")]
        for choice, strict, parallel, (parser, reasoning) in itertools.product(
            CHOICES, (False, True), (True, False), reasonings
        ):
            yield ToolsRequest(
                builder="vllm",
                format=fmt,
                tools=tools(strict),
                tool_choice=choice,
                reasoning=reasoning,  # type: ignore[arg-type]
                parallel_tool_calls=parallel,
                reasoning_parser=parser,
            )


def extra() -> list[ToolsRequest]:
    """Strict levels and a response_format beside the tools (vLLM's auto + structured output)."""
    schema = {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": {"type": "object"}},
    }
    out = []
    for fmt in ("hermes", "qwen3_coder", "deepseek_v4", "glm47"):
        for level in ("function", "parameter"):
            out.append(
                ToolsRequest(builder="vllm", format=fmt, tools=tools(False), strict_level=level)
            )
        for strict in (False, True):
            out.append(
                ToolsRequest(
                    builder="vllm", format=fmt, tools=tools(strict), response_format=schema
                )
            )
    # DeepSeek-R1's reasoning parser needs <think> and </think> as single tokens (the default
    # model spells them in pieces; vLLM refuses it there).
    for choice in ("auto", "required"):
        out.append(
            ToolsRequest(
                builder="vllm",
                format="hermes",
                tools=tools(True),
                tool_choice=choice,
                reasoning="enabled",
                reasoning_parser="deepseek_r1",
            )
        )
    return out


def case(request: ToolsRequest, tokenizer: str) -> dict[str, Any]:
    fields = asdict(request)
    return {
        "tokenizer": tokenizer,
        **{k: fields[k] for k in ("format", "tools", "tool_choice", "parallel_tool_calls")},
        **{k: fields[k] for k in ("reasoning", "reasoning_parser", "strict_level")},
        "response_format": fields["response_format"],
    }


def ask_oracle(
    cases: list[dict[str, Any]], *, env: dict[str, str] | None = None, formats_on: str | None = None
) -> dict[str, Any]:
    environment = {k: v for k, v in os.environ.items() if k != "VLLM_ENFORCE_STRICT_TOOL_CALLING"}
    done = subprocess.run(
        [str(VLLM_PYTHON), "-I", str(ORACLE)],
        input=json.dumps({"cases": cases, "formats_on": formats_on}),
        capture_output=True,
        text=True,
        env=environment | (env or {}),
        check=False,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    assert VLLM_PYTHON.exists(), f"{VLLM_PYTHON} is missing: run `make vllm-install`"
    cache = tmp_path_factory.mktemp("tokenizers")
    return {
        "deepseek-v4": str(tokenizer_dir("deepseek-v4", cache)),
        "qwen3.6": str(tokenizer_dir("qwen3.6", cache)),
        "default": checkpoint_source(Settings()),
    }


#: The runners' own directory: a runner another process keeps warm is never this test's.
RUNNERS = Path(tempfile.mkdtemp(prefix="vllm-builder-runners-"))


@pytest.fixture(scope="module")
def builder() -> Iterator[VllmBuilder]:
    settings = Settings(vllm_python=VLLM_PYTHON, vllm_timeout_s=600, stack_runner_dir=RUNNERS)
    with VllmBuilder(settings) as built:
        yield built
        pids = [built.runner_pid(strict) for strict in (None, True, False)]
    # close() (leaving the block) killed every runner it had started
    assert pids[0] is not None
    assert not [pid for pid in pids if pid is not None and Path(f"/proc/{pid}").exists()]


@pytest.fixture(scope="module")
def requests(tokenizers: dict[str, str]) -> list[tuple[str, ToolsRequest]]:
    return [(name, r) for name in tokenizers for r in [*grid(), *extra()]]


@pytest.fixture(scope="module")
def oracle(requests: list[tuple[str, ToolsRequest]], tokenizers: dict[str, str]) -> dict[str, Any]:
    cases = [case(r, tokenizers[name]) for name, r in requests]
    # A reasoning parser that refuses a tokenizer: the tag is the one built without it.
    cases += [case(_without_reasoning_parser(r), tokenizers[name]) for name, r in requests]
    cases = list({json.dumps(c, sort_keys=True): c for c in cases}.values())
    answer = ask_oracle(cases, formats_on=tokenizers["default"])
    results = answer["results"]
    return {
        "cases": {
            json.dumps(c, sort_keys=True): res for c, res in zip(cases, results, strict=True)
        },
        "formats": answer["formats"],
    }


@pytest.fixture(scope="module")
def builds(
    builder: VllmBuilder, requests: list[tuple[str, ToolsRequest]], tokenizers: dict[str, str]
) -> list[ToolsBuild]:
    return [builder.build(request, tokenizers[name]) for name, request in requests]


def _without_reasoning_parser(request: ToolsRequest) -> ToolsRequest:
    return ToolsRequest(**{**asdict(request), "reasoning_parser": None})


def expected(oracle: dict[str, Any], request: ToolsRequest, tokenizer: str) -> dict[str, Any]:
    result: dict[str, Any] = oracle["cases"][json.dumps(case(request, tokenizer), sort_keys=True)]
    return result


def test_the_tag_is_vllms_own_field_for_field(
    builds: list[ToolsBuild],
    requests: list[tuple[str, ToolsRequest]],
    tokenizers: dict[str, str],
    oracle: dict[str, Any],
) -> None:
    mismatches = []
    tags = refused = 0
    for (name, request), got in zip(requests, builds, strict=True):
        path = tokenizers[name]
        want = expected(oracle, request, path)
        if "error" in want:
            # vLLM refuses the reasoning parser on this tokenizer: the tool parser's tag is
            # still shown, and the end marker said unavailable.
            want = expected(oracle, _without_reasoning_parser(request), path)
            assert "error" not in want, want
            assert got.reasoning_end is None
            assert any("reasoning end marker unavailable" in n for n in got.notes), got.notes
            want = {**want, "reasoning_end": None}
            refused += 1
        if (got.tag, got.reasoning_end) != (want["tag"], want["reasoning_end"]):
            mismatches.append((name, request, want, got))
        assert (got.tag is None) == (got.reason is not None), got
        tags += got.tag is not None
    assert not mismatches, mismatches[:3]
    assert tags > len(requests) // 3  # the grid is not all "no tag"
    assert refused  # a reasoning parser refused the default model's tokenizer


def test_every_tag_compiles_with_maskscopes_xgrammar(
    builds: list[ToolsBuild], tokenizers: dict[str, str], requests: list[tuple[str, ToolsRequest]]
) -> None:
    for name, path in tokenizers.items():
        compiler = xgr.GrammarCompiler(
            xgr.TokenizerInfo.from_huggingface(AutoTokenizer.from_pretrained(path)),
            cache_enabled=False,
        )
        seen = set()
        for (tokenizer_name, _), built in zip(requests, builds, strict=True):
            tag = built.tag if tokenizer_name == name else None
            text = json.dumps(tag, sort_keys=True)
            if tag is None or text in seen:
                continue
            seen.add(text)
            compiler.compile_structural_tag(json.dumps(tag))
        assert seen


def test_no_tag_for_auto_with_non_strict_tools_and_vllms_reason(
    builder: VllmBuilder, tokenizers: dict[str, str]
) -> None:
    request = ToolsRequest(builder="vllm", format="hermes", tools=tools(False), tool_choice="auto")
    built = builder.build(request, tokenizers["qwen3.6"])
    assert built.tag is None
    assert built.reason is not None and "strict" in built.reason
    required = builder.build(
        ToolsRequest(builder="vllm", format="hermes", tools=tools(False), tool_choice="required"),
        tokenizers["qwen3.6"],
    )
    assert required.tag is not None


def test_versions_and_what_xgrammar_0_2_9_builds_differently(
    builder: VllmBuilder, tokenizers: dict[str, str]
) -> None:
    request = ToolsRequest(builder="vllm", format="deepseek_v4", tools=tools(True))
    built = builder.build(request, tokenizers["deepseek-v4"])
    assert built.builder_versions == {"vllm": "0.32.0", "xgrammar": "0.2.8"}
    assert any("stop_after_first" in note and "0.2.9" in note for note in built.notes), built.notes
    # Hermes' tag is vLLM's own builder, no xgrammar builtin: nothing to compare.
    hermes = builder.build(
        ToolsRequest(builder="vllm", format="hermes", tools=tools(True)), tokenizers["qwen3.6"]
    )
    assert not [n for n in hermes.notes if "builds 'hermes' differently" in n]
    assert any("xgrammar 0.2.8" in n for n in hermes.notes)


def test_strict_tool_calling_off_builds_no_tag_like_vllm(
    builder: VllmBuilder, tokenizers: dict[str, str]
) -> None:
    requests = [
        ToolsRequest(
            builder="vllm",
            format=fmt,
            tools=tools(True),
            tool_choice=choice,
            strict_tool_calling=False,
        )
        for fmt in ("hermes", "deepseek_v4")
        for choice in ("auto", "required")
    ]
    path = tokenizers["deepseek-v4"]
    want = ask_oracle(
        [case(r, path) for r in requests], env={"VLLM_ENFORCE_STRICT_TOOL_CALLING": "0"}
    )["results"]
    for request, result in zip(requests, want, strict=True):
        built = builder.build(request, path)
        assert built.tag == result["tag"] is None
        assert built.reason is not None and "VLLM_ENFORCE_STRICT_TOOL_CALLING" in built.reason
    # the default runner still builds tags
    assert builder.build(ToolsRequest(builder="vllm", format="hermes", tools=tools(True)), path).tag


def test_formats_are_every_parser_vllm_registers(
    builder: VllmBuilder, tokenizers: dict[str, str], oracle: dict[str, Any]
) -> None:
    listed = builder.formats(tokenizer=tokenizers["default"])
    assert {f.name: f.available for f in listed} == {
        name: entry["available"] for name, entry in oracle["formats"].items()
    }
    by_name = {f.name: f for f in listed}
    assert by_name["hermes"].builds_tag and by_name["deepseek_v4"].builds_tag
    assert not by_name["pythonic"].builds_tag
    unavailable = [f for f in listed if not f.available]
    assert unavailable, "some parsers need markers the default model does not have"
    for entry in unavailable:  # the tokenizer's directory named, never its server path
        error = oracle["formats"][entry.name]["error"]
        error = error.replace(tokenizers["default"], Path(tokenizers["default"]).name)
        assert entry.reason and error in entry.reason
    assert by_name["deepseek_v4"].reasoning_end == "</think>"


def test_refusals_point_into_the_source(builder: VllmBuilder, tokenizers: dict[str, str]) -> None:
    path = tokenizers["default"]
    bad_tool = ({"type": "function", "function": {"name": 3}},)
    with pytest.raises(GrammarError) as caught:
        builder.build(ToolsRequest(builder="vllm", format="hermes", tools=bad_tool), path)
    assert caught.value.pointer == "/tools/0/function/name"
    unknown = {"type": "function", "function": {"name": "nope"}}
    with pytest.raises(GrammarError) as caught:
        builder.build(
            ToolsRequest(builder="vllm", format="hermes", tools=tools(True), tool_choice=unknown),
            path,
        )
    assert caught.value.pointer == "/tool_choice"
    with pytest.raises(GrammarError) as caught:
        builder.build(ToolsRequest(builder="vllm", format="no_such", tools=tools(True)), path)
    assert caught.value.pointer == "/format"
    # vLLM's start-up check: the parser needs markers this tokenizer spells in pieces
    with pytest.raises(GrammarError) as caught:
        builder.build(ToolsRequest(builder="vllm", format="llama3_json", tools=tools(True)), path)
    assert caught.value.pointer == "/format" and "tokenizer" in caught.value.message


def test_the_runner_is_reused_and_restarted_when_it_dies(
    builder: VllmBuilder, tokenizers: dict[str, str]
) -> None:
    request = ToolsRequest(
        builder="vllm", format="hermes", tools=tools(True), tool_choice="required"
    )
    path = tokenizers["default"]
    first = builder.build(request, path)
    pid = builder.runner_pid()
    assert pid is not None
    assert builder.build(request, path) == first and builder.runner_pid() == pid
    os.kill(pid, signal.SIGKILL)
    assert builder.build(request, path) == first
    assert builder.runner_pid() not in (None, pid)


def test_a_call_past_the_time_limit_stops_the_runner(
    tokenizers: dict[str, str], runner_dir: Path
) -> None:
    # Its own runner directory: the module's runner, stopped here, would be gone for the rest.
    request = ToolsRequest(builder="vllm", format="hermes", tools=tools(True))
    with VllmBuilder(
        Settings(vllm_python=VLLM_PYTHON, vllm_timeout_s=600, stack_runner_dir=runner_dir)
    ) as started:
        started.build(request, tokenizers["default"])
        pid = started.runner_pid()
        assert pid is not None
        # The hello answers within 0.2 s; loading Qwen3.6's tokenizer for the build does not.
        hasty = VllmBuilder(
            Settings(vllm_python=VLLM_PYTHON, vllm_timeout_s=0.2, stack_runner_dir=runner_dir)
        )
        with pytest.raises(GrammarTooComplex, match="did not answer.*MASKSCOPE_VLLM_TIMEOUT_S"):
            hasty.build(request, tokenizers["qwen3.6"])
        assert hasty.runner_pid() is None
        hasty.close()
        # The one runner it called was sent SIGKILL, which a moment later its starter reaps.
        deadline = time.monotonic() + 10
        while started.runner_pid() is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert started.runner_pid() is None


def test_without_vllms_virtualenv_the_builder_is_listed_unavailable(tmp_path: Path) -> None:
    builder = VllmBuilder(Settings(vllm_python=tmp_path / "no-venv" / "bin" / "python"))
    (only,) = builder.formats()
    assert not only.available and only.reason and "make vllm-install" in only.reason
    with pytest.raises(GrammarError, match="make vllm-install"):
        builder.build(ToolsRequest(builder="vllm", format="hermes", tools=tools(True)), "x")


def test_a_virtualenv_that_does_not_run_is_listed_unavailable_too(
    tmp_path: Path, runner_dir: Path
) -> None:
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'vLLM is broken here' >&2\nexit 3\n")
    broken.chmod(0o755)
    builder = VllmBuilder(Settings(vllm_python=broken, stack_runner_dir=runner_dir))
    (only,) = builder.formats(tokenizer="x")
    assert not only.available and only.reason and "vLLM is broken here" in only.reason
    with pytest.raises(GrammarError, match="vLLM is broken here"):
        builder.build(ToolsRequest(builder="vllm", format="hermes", tools=tools(True)), "x")
    builder.close()
