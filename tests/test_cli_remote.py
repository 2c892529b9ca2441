"""``--model``: the command line on a remote engine (a real ``vllm serve``)."""

from __future__ import annotations

import json

import pytest

from app.__main__ import main
from app.engine import ChatMessage, Engine, GrammarKind, GrammarSpec
from tests.engine.model.remote.conftest import spec_for
from tests.test_cli import NESTED, PROMPT
from tests.vllm_server import VllmServer

pytestmark = pytest.mark.remote


@pytest.fixture(autouse=True)
def _engines(monkeypatch: pytest.MonkeyPatch, vllm_server: VllmServer) -> None:
    specs = [spec_for(vllm_server), spec_for("http://127.0.0.1:9/v1", id="down")]
    monkeypatch.setenv("MASKSCOPE_REMOTE_ENGINES", json.dumps([s.model_dump() for s in specs]))
    monkeypatch.setenv("MASKSCOPE_COMPILE_WORKERS", "1")


def test_trace_on_the_remote_engine_gives_the_local_tokens(
    capsys: pytest.CaptureFixture[str], engine: Engine
) -> None:
    status = main(["trace", "--schema", str(NESTED), "--prompt", PROMPT, "--steps", "6",
                   "--json", "--model", "vllm"])  # fmt: skip
    assert status == 1  # six tokens do not finish the document
    remote = [json.loads(line) for line in capsys.readouterr().out.splitlines()[:-1]]
    assert all(s["inexact"] == [] for s in remote)
    # The local model on the same request, as `trace --model local` runs it.
    spec = GrammarSpec(GrammarKind.JSON_SCHEMA, NESTED.read_text(encoding="utf-8"))
    local = engine.new_session(spec, messages=[ChatMessage("user", PROMPT)], max_tokens=6)
    assert [s["token_id"] for s in remote] == [r.token_id for r in local.run(6)]


def test_replay_on_the_remote_engines_tokenizer(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["replay", "--schema", str(NESTED), "--text", '{"user": 5}', "--model", "vllm"]) == 1
    )
    assert capsys.readouterr().out.rstrip().endswith("accepted: False; complete: False")


@pytest.mark.parametrize(
    ("model", "said"),
    [("nope", "no remote engine 'nope'"), ("down", "remote engine 'down'")],
)
def test_a_model_that_is_not_there_exits_2_and_says_why(
    capsys: pytest.CaptureFixture[str], model: str, said: str
) -> None:
    assert main(["replay", "--schema", str(NESTED), "--text", "{}", "--model", model]) == 2
    assert said in capsys.readouterr().err
