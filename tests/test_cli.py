"""``python -m app trace`` and ``replay`` with the real model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.__main__ import main

# The commands load the real model in this process: the model tier (docs/testing.md)
pytestmark = pytest.mark.model

ROOT = Path(__file__).resolve().parent.parent
NESTED = ROOT / "schemas" / "nested.json"
PROMPT = "Create the account of user 42, Ada Lovelace, who prefers a dark theme."
STEP_KEYS = {
    "index", "token_id", "token_text", "token_bytes", "forced", "prob", "rank", "top",
    "blocked_mass", "allowed_count", "vocab_size", "bitmask", "depth", "path", "rules",
    "jump_forward", "probe", "mask_accept_agree", "engine", "forward_ms", "mask_us", "total_ms",
    "terminated", "allowed_tokens", "follower", "drafts", "rollback", "masked", "segment",
    "alarms", "classes", "straddle", "emptied_by_processors", "empty_mask",
}  # fmt: skip


@pytest.fixture(autouse=True)
def _one_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MASKSCOPE_COMPILE_WORKERS", "1")


def test_trace_json_lines_in_a_real_process() -> None:
    command = [sys.executable, "-m", "app", "trace", "--schema", str(NESTED), "--prompt", PROMPT,
               "--system", "Reply with JSON only.", "--schema-in-prompt", "--json"]  # fmt: skip
    env = {**os.environ, "MASKSCOPE_COMPILE_WORKERS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    steps, last = lines[:-1], lines[-1]
    assert all(set(step) == STEP_KEYS for step in steps)
    assert [s["index"] for s in steps] == list(range(len(steps)))
    assert last["done"] and last["stop_reason"] == "terminated"
    assert last["validation"] == {"valid": True, "errors": []}
    assert json.loads(last["text"])["user"]["id"] == 42


def test_trace_plain_stops_at_the_step_limit(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["trace", "--schema", str(NESTED), "--prompt", PROMPT, "--steps", "4"])
    out = capsys.readouterr().out.splitlines()
    assert status == 1  # incomplete output
    assert [line.split()[0] for line in out[:4]] == ["0", "1", "2", "3"]
    assert "allowed" in out[0] and "depth" in out[0] and "ms" in out[0]
    assert out[-1].startswith("stop: max_tokens; valid: {'valid': False")


def test_replay_exit_status(capsys: pytest.CaptureFixture[str]) -> None:
    good = '{"user": {"id": 7, "profile": {"display_name": "A", "settings": '
    good += '{"theme": "dark", "notifications": true}}}}'
    assert main(["replay", "--schema", str(NESTED), "--text", good]) == 0
    assert capsys.readouterr().out.rstrip().endswith("accepted: True; complete: True")
    assert main(["replay", "--schema", str(NESTED), "--text", '{"user": 5}', "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["rejection"]["offset"] == 9


def test_a_bad_schema_is_reported_with_its_place(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"type": "object",\n "properties": {"a": {"type": "strnig"}}}')
    assert main(["replay", "--schema", str(bad), "--text", "{}"]) == 2
    err = capsys.readouterr().err
    assert "not a valid JSON Schema" in err and "line 2" in err and "/properties/a/type" in err


def test_replay_with_llguidance_and_compare(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """llguidance accepts "-0"; xgrammar, following, refuses its "0" (offset 1)."""
    integer = tmp_path / "integer.json"
    integer.write_text('{"type": "integer"}')
    command = ["replay", "--schema", str(integer), "--text", "-0", "--engine", "llguidance"]
    assert main([*command, "--compare", "xgrammar"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-2:] == [
        "accepted: True; complete: True",
        "xgrammar: accepted: False; complete: False (refused at offset 1)",
    ]


def test_trace_under_llguidance_with_xgrammar_following(
    capsys: pytest.CaptureFixture[str],
) -> None:
    command = ["trace", "--schema", str(NESTED), "--prompt", PROMPT, "--steps", "3"]
    assert main([*command, "--engine", "llguidance", "--compare", "xgrammar"]) == 1
    out = capsys.readouterr().out.splitlines()
    # At step 0 xgrammar's mask also has "{" where llguidance's keeps only the canonical '{"':
    # a difference of masks (llguidance takes "{" too), not of languages, so no note.
    assert [line.split()[0] for line in out[:3]] == ["0", "1", "2"]
    assert not any("xgrammar" in line for line in out[:3])
    assert out[-1] == "xgrammar: no divergence"


STRUCTURAL_TAG = {
    "type": "structural_tag",
    "format": {
        "type": "tag",
        "begin": "<answer>",
        "content": {"type": "regex", "pattern": "(yes|no)"},
        "end": "</answer>",
    },
}


def test_replay_and_trace_under_a_structural_tag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tag's .json reads as a schema unless --kind says structural_tag."""
    tag = tmp_path / "tag.json"
    tag.write_text(json.dumps(STRUCTURAL_TAG, indent=2))
    flags = ["--schema", str(tag), "--kind", "structural_tag"]
    assert main(["replay", *flags, "--text", "<answer>yes</answer>"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("accepted: True; complete: True")
    assert main(["replay", *flags, "--text", "<answer>maybe</answer>", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["rejection"]["offset"] == len("<answer>")
    status = main(["trace", *flags, "--prompt", "Is the sky blue?", "--steps", "30", "--json"])
    captured = capsys.readouterr()
    last = json.loads(captured.out.splitlines()[-1])
    assert last["text"] in ("<answer>yes</answer>", "<answer>no</answer>"), last
    assert status == 0, last
    assert "a structural tag takes no compile options" in captured.err


def test_a_bad_structural_tag_is_reported_with_its_place(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = json.loads(json.dumps(STRUCTURAL_TAG))
    bad["format"]["content"]["pattern"] = "(yes|no"
    tag = tmp_path / "bad.json"
    tag.write_text(json.dumps(bad, indent=2))
    assert main(["replay", "--schema", str(tag), "--kind", "structural_tag", "--text", "x"]) == 2
    err = capsys.readouterr().err
    assert "regex leaf" in err and "/format/content/pattern" in err and "line 8" in err
