"""``python -m app replay --token-ids / --log --model qwen3.6``: a logged batch replayed on the
shipped Qwen3.6 tokenizer from the command line (no model is loaded)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import xgrammar as xgr

from app.__main__ import main

# The commands load the real model in this process: the model tier (docs/testing.md)
pytestmark = pytest.mark.model

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": CITY}}
LOG = (
    "(EngineCore pid=9) ERROR 12-01 10:00:00 [scheduler.py:2190] Unexpected: grammar rejected "
    "tokens [198, 248069, 271] for request chatcmpl-2. Terminating request."
)


@pytest.fixture(autouse=True)
def _one_worker(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MASKSCOPE_COMPILE_WORKERS", "1")
    monkeypatch.setenv("MASKSCOPE_DB_PATH", str(tmp_path / "p.db"))


def _tag(tmp_path: Path, *, reasoning: bool) -> str:
    path = tmp_path / "tag.json"
    built = xgr.get_model_structural_tag("qwen_3_5", tools=[WEATHER], reasoning=reasoning)
    path.write_text(built.model_dump_json())
    return str(path)


def test_token_ids_and_text_replay_on_the_shipped_qwen_tokenizer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["replay", "--schema", _tag(tmp_path, reasoning=True), "--kind", "structural_tag",
            "--model", "qwen3.6", "--text", "Hm.", "--token-ids", "198,248069,271",
            "--json"]  # fmt: skip
    assert main(args) == 0  # accepted, and the tag may end after the reasoning
    answer = json.loads(capsys.readouterr().out)
    assert answer["accepted"] and answer["complete"] and answer["refusal"] is None
    assert [t["token_id"] for t in answer["tokens"]][-3:] == [198, 248069, 271]


def test_a_log_line_is_replayed_and_its_refusal_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["replay", "--schema", _tag(tmp_path, reasoning=False), "--kind", "structural_tag",
            "--model", "qwen3.6", "--log", LOG]  # fmt: skip
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "first refused id 248069 '</think>' (special) at token 1" in out
    assert "allowed there: " in out and "of 248320" in out
    assert "cause: '</think>' is refused" in out and "excludes" in out


def test_a_log_line_of_no_known_message_exits_2_naming_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["replay", "--schema", _tag(tmp_path, reasoning=True), "--kind", "structural_tag",
            "--model", "qwen3.6", "--log", "WARNING nothing here"]  # fmt: skip
    assert main(args) == 2
    assert "grammar rejected tokens %s" in capsys.readouterr().err


def test_nothing_to_replay_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["replay", "--schema", _tag(tmp_path, reasoning=True), "--kind", "structural_tag"]
    assert main(args) == 2
    assert "give --text, --token-ids or --log" in capsys.readouterr().err


def _qwen3_coder_required(tmp_path: Path) -> Path:
    """vLLM's qwen3_coder tools source with the qwen3 reasoning parser, ``required``."""
    source = tmp_path / "tools.json"
    source.write_text(json.dumps({
        "builder": "vllm", "format": "qwen3_coder", "reasoning_parser": "qwen3",
        "tools": [{"type": "function", "function": {
            "name": "get_weather", "strict": True, "parameters": CITY}}],
        "tool_choice": "required",
    }))  # fmt: skip
    return source


def test_a_logged_batch_is_replayed_as_vllm_applied_it_after_the_reasoning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """vLLM's qwen3_coder tag (its own code, .venv-vllm) with the qwen3 reasoning parser: under
    mask_after_end the ids up to ``</think>`` are the reasoning, walked with no mask, as vLLM
    walked them, and the blank line after it is refused: ``required`` wants ``<tool_call>`` at
    once (vLLM PR #46272's failure); from token 0 (``none``) the tag refuses earlier."""
    source = _qwen3_coder_required(tmp_path)
    base = ["replay", "--schema", str(source), "--kind", "tools", "--model", "qwen3.6",
            "--log", LOG, "--json"]  # fmt: skip
    main([*base, "--reasoning", "mask_after_end"])
    after_end = json.loads(capsys.readouterr().out)
    assert [t["masked"] for t in after_end["tokens"][:2]] == [False, False]
    refusal = after_end["refusal"]
    assert refusal["index"] == 2 and refusal["token_id"] == 271
    assert "<tool_call>" in refusal["allowed_tokens"]
    main(base)
    from_start = json.loads(capsys.readouterr().out)
    assert all(t["masked"] for t in from_start["tokens"])
    assert from_start["refusal"] is not None and from_start["refusal"]["index"] < 2


def test_under_a_stack_the_reasoning_is_that_releases_parsers_and_the_refusal_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--stack``: the same logged batch walked by vLLM 0.32.0's own scheduler-side masking in
    its runner: its qwen3 reasoning parser ends the reasoning at ``</think>`` (no
    ``--reasoning`` needed: the tools source names the parser), the blank line is refused, and
    the answer names the stack that filled the rows."""
    source = _qwen3_coder_required(tmp_path)
    base = ["replay", "--schema", str(source), "--kind", "tools", "--model", "qwen3.6",
            "--log", LOG, "--stack", "vllm-0.32.0"]  # fmt: skip
    assert main([*base, "--json"]) == 1
    walked = json.loads(capsys.readouterr().out)
    assert walked["mask_by"]["stack"] == "vllm-0.32.0"
    assert [t["masked"] for t in walked["tokens"][:2]] == [False, False]
    assert walked["refusal"]["index"] == 2 and walked["refusal"]["token_id"] == 271
    assert "vLLM 0.32.0" in walked["refusal"]["cause"]
    assert main(base) == 1
    assert "masked by vllm-0.32.0: xgrammar" in capsys.readouterr().out
