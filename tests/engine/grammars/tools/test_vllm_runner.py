"""The vLLM builder's runner process (issue #46, item 8): one process for every tokenizer and every
strict-calling setting, answering as a process started under each setting would; a minimal
environment; a memory cap it starts and serves under; a cold start that holds no lock.

The real runner in .venv-vllm throughout; the oracle is vLLM's code called the obvious way in a
fresh process per setting (what a runner kept per setting answered).
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest

from app.engine.grammars.tools.base import ToolsBuild, ToolsRequest
from app.engine.grammars.tools.vllm_builder import RUNNER, VllmBuilder
from app.engine.model.loading import checkpoint_source
from app.engine.model.shipped_tokenizers import tokenizer_dir
from app.exceptions import GrammarError
from app.settings import Settings
from tests.vllm_oracle import VLLM_PYTHON, run_vllm

# vLLM's tools runner: a real process serving requests (tests/tiers.py)
pytestmark = pytest.mark.server

STRICT_ENV = "VLLM_ENFORCE_STRICT_TOOL_CALLING"
TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}},
            "required": ["query"],
        },
    },
}
NAMED = {"type": "function", "function": {"name": "search"}}
#: Variables the runner may have: the named ones it is given, nothing inherited by chance.
ALLOWED = {
    "PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "XDG_CACHE_HOME", "HF_HOME", "HF_HUB_CACHE",
    "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "VLLM_CACHE_ROOT", "VLLM_CONFIG_ROOT",
    "VLLM_LOGGING_LEVEL", STRICT_ENV, "TOKENIZERS_PARALLELISM",
}  # fmt: skip

# vLLM's code the obvious way, in a process started under one setting of the variable.
ORACLE = r"""
import json, os, sys
answers = os.fdopen(os.dup(1), "w"); os.dup2(2, 1)
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
from vllm.parser.parser_manager import ParserManager
from vllm.tokenizers import get_tokenizer
question = json.load(sys.stdin)
tokenizer = get_tokenizer(question["tokenizer"])
out = []
for case in question["cases"]:
    parser_cls = ParserManager.get_parser(
        tool_parser_name=case["format"], enable_auto_tools=True, tokenizer=tokenizer
    )
    request = ChatCompletionRequest(
        model="oracle", messages=[{"role": "user", "content": "hi"}],
        tools=case["tools"], tool_choice=case["tool_choice"],
    )
    request = parser_cls(tokenizer, request.tools).adjust_request(request)
    outputs = request.structured_outputs
    out.append({
        "tag": json.loads(outputs.structural_tag) if outputs and outputs.structural_tag else None,
        "json": outputs is not None and outputs.json is not None,
    })
answers.write(json.dumps(out) + "\n"); answers.flush()
"""


def _settings(**fields: Any) -> Settings:
    assert VLLM_PYTHON.exists(), f"{VLLM_PYTHON} is missing: run `make vllm-install`"
    runners = Path(tempfile.mkdtemp(prefix="vllm-runner-"))  # a runner of this test alone
    return Settings(vllm_python=VLLM_PYTHON, vllm_timeout_s=600, stack_runner_dir=runners, **fields)


def _request(fmt: str, choice: Any, strict: bool | None) -> ToolsRequest:
    return ToolsRequest(
        builder="vllm", format=fmt, tools=(TOOL,), tool_choice=choice, strict_tool_calling=strict
    )


_EARLIER: set[int] = set()


@pytest.fixture(autouse=True)
def _earlier_runners() -> None:
    """The runners other tests' builders keep (another module's, in this process): not this
    test's."""
    _EARLIER.clear()
    _EARLIER.update(_runners())


def _runners(directory: Path | None = None) -> list[int]:
    """The runner processes this test process started (since the test began) that still run
    (those listening under ``directory``, when given)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        parent = int(stat.rpartition(")")[2].split()[1])
        mine = directory is None or str(directory).encode() in command
        if parent == os.getpid() and str(RUNNER).encode() in command and mine:
            if int(entry.name) not in _EARLIER:
                found.append(int(entry.name))
    return found


def _status(pid: int, field: str) -> int:
    """A ``kB`` field of ``/proc/<pid>/status``, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} for {pid}")


@pytest.fixture(scope="module")
def tokenizer() -> str:
    return checkpoint_source(Settings())


def test_the_runner_gets_no_secret_and_nothing_inherited_by_chance(
    monkeypatch: pytest.MonkeyPatch, tokenizer: str
) -> None:
    monkeypatch.setenv("MASKSCOPE_SECRET", "a-secret-of-the-server-0123456789")
    monkeypatch.setenv("MASKSCOPE_MAX_SESSIONS", "3")
    monkeypatch.setenv("INHERITED_BY_CHANCE", "1")
    with VllmBuilder(_settings()) as builder:
        builder.build(_request("hermes", "required", None), tokenizer)
        pid = builder.runner_pid()
        assert pid is not None
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    names = {item.partition(b"=")[0].decode() for item in raw.split(b"\0") if item}
    assert b"a-secret-of-the-server" not in raw
    assert not [name for name in names if name.startswith("MASKSCOPE_")]
    assert names <= ALLOWED, names - ALLOWED
    assert {"PATH", "HOME"} <= names


def test_strict_calling_on_and_off_is_served_by_one_runner_as_two_would_serve_it(
    monkeypatch: pytest.MonkeyPatch, tokenizer: str
) -> None:
    cases = [(fmt, choice) for fmt in ("hermes", "deepseek_v4") for choice in ("required", NAMED)]
    oracle: dict[str | None, list[dict[str, Any]]] = {}
    question = {
        "tokenizer": tokenizer,
        "cases": [{"format": f, "tools": [TOOL], "tool_choice": c} for f, c in cases],
    }
    for setting in ("0", "1", None):  # a process started under each setting
        if setting is None:
            monkeypatch.delenv(STRICT_ENV, raising=False)
        else:
            monkeypatch.setenv(STRICT_ENV, setting)
        oracle[setting] = run_vllm(ORACLE, question)
    monkeypatch.delenv(STRICT_ENV, raising=False)
    wanted = {False: oracle["0"], True: oracle["1"], None: oracle[None]}
    # on first (vLLM makes its parser classes then, and reads the setting as it does), then off,
    # then on again: each answered as a process started under its setting answers it
    order: list[bool | None] = [True, False, None, False, True]
    with VllmBuilder(_settings()) as builder:
        pids = set()
        for strict in order:
            for (fmt, choice), want in zip(cases, wanted[strict], strict=True):
                built = builder.build(_request(fmt, choice, strict), tokenizer)
                pids.add(builder.runner_pid())
                _assert_same(built, want, (fmt, choice, strict))
        assert len(pids) == 1 and None not in pids
        assert _runners() == list(pids)
    assert any(w["json"] for w in wanted[False]) and any(w["tag"] for w in wanted[True])


def _assert_same(built: ToolsBuild, want: dict[str, Any], what: Any) -> None:
    assert built.tag == want["tag"], what
    if built.tag is None:  # the builder says what constrains the call instead of a tag
        assert built.reason is not None
        assert ("a JSON Schema of the call list" in built.reason) == want["json"], what


def test_the_runner_starts_and_serves_every_tokenizer_under_its_memory_cap(
    tokenizer: str, tmp_path: Path
) -> None:
    cap_mb = Settings().vllm_runner_memory_mb
    paths = [tokenizer, *(str(tokenizer_dir(n, tmp_path)) for n in ("deepseek-v4", "qwen3.6"))]
    with VllmBuilder(_settings()) as builder:
        for path in paths:
            assert builder.build(_request("hermes", "required", None), path).tag
        pid = builder.runner_pid()
        assert pid is not None
        limits = Path(f"/proc/{pid}/limits").read_text()
        data = _status(pid, "VmData")
        peak = _status(pid, "VmHWM")
    row = next(line for line in limits.splitlines() if line.startswith("Max data size"))
    assert row.split()[3:5] == [str(cap_mb * 1024 * 1024)] * 2
    assert data < cap_mb * 1024 * 1024
    print(f"runner: VmData {data >> 20} MB, peak RSS {peak >> 20} MB, cap {cap_mb} MB")


def test_a_cap_far_too_small_fails_the_start_with_a_clear_message(tokenizer: str) -> None:
    settings = _settings(vllm_runner_memory_mb=200)
    with VllmBuilder(settings) as builder:
        with pytest.raises(GrammarError) as caught:
            builder.build(_request("hermes", "required", None), tokenizer)
        assert builder.runner_pid() is None
    assert caught.value.message.startswith("vLLM's tools builder did not start: it ran out of")
    assert "its memory cap is 200 MB, MASKSCOPE_VLLM_RUNNER_MEMORY_MB" in caught.value.message
    # its own directory's: another builder of this process may start a runner meanwhile
    assert _runners(settings.stack_runner_dir) == []


def test_a_cold_start_holds_no_lock_close_stops_it_at_once(tokenizer: str) -> None:
    builder = VllmBuilder(_settings())
    outcome: dict[str, Any] = {}

    def build() -> None:
        try:
            outcome["built"] = builder.build(_request("hermes", "required", True), tokenizer)
        except GrammarError as error:
            outcome["error"] = error

    thread = threading.Thread(target=build)
    thread.start()
    while not _runners() and thread.is_alive():  # its process exists: vLLM is being imported
        threading.Event().wait(0.05)
    starting = _runners()
    assert starting and builder.runner_pid() is None
    builder.close()  # takes no lock the start holds: it stops the start, it does not wait for it
    thread.join()
    assert "built" not in outcome, "the start ran to its end before close() could stop it"
    assert outcome["error"].message == "vLLM's tools builder was closed while it started"
    assert not [pid for pid in starting if Path(f"/proc/{pid}").exists()]


def test_builds_at_once_from_a_cold_start_share_one_start(tokenizer: str) -> None:
    answers: list[ToolsBuild] = []
    with VllmBuilder(_settings()) as builder:
        threads = [
            threading.Thread(
                target=lambda s=strict: answers.append(
                    builder.build(_request("hermes", "required", s), tokenizer)
                )
            )
            for strict in (True, False, None)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(answers) == 3
        assert sorted(a.tag is not None for a in answers) == [False, True, True]
        assert _runners() == [builder.runner_pid()]
    assert json.dumps([a.builder_versions for a in answers]).count("0.32.0") == 3
