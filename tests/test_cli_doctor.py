"""``python -m app doctor``: its report and exit status."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.__main__ import main

# The commands load the real model in this process: the model tier (docs/testing.md)
pytestmark = pytest.mark.model

ROOT = Path(__file__).resolve().parent.parent
NESTED = ROOT / "schemas" / "nested.json"


@pytest.fixture(autouse=True)
def _one_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MASKSCOPE_COMPILE_WORKERS", "1")


def test_an_ignored_keyword_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    schema = tmp_path / "tags.json"
    schema.write_text('{"type": "array",\n "items": {"type": "string"},\n "uniqueItems": true}')
    # the search is bounded by its counts; the budget is only the safety stop a loaded machine
    # can reach (1.5 s once cut the witness search short in a full serial run)
    assert main(["doctor", "--schema", str(schema), "--budget-ms", "20000"]) == 1
    out = capsys.readouterr().out
    assert "  ignored   /uniqueItems (line 3): xgrammar writes the same grammar" in out
    assert "grammar_accepts_schema_rejects" in out and "has non-unique elements" in out
    assert "  vllm           refuses" in out and "falls back to guidance" in out


def test_a_named_backend_that_refuses_exits_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    args = ["doctor", "--schema", str(NESTED), "--json", "--budget-ms", "1000"]
    assert main([*args, "--backend", "openai_strict"]) == 1
    report = json.loads(capsys.readouterr().out)
    verdicts = {row["backend"]: row["verdict"] for row in report["backends"]}
    assert verdicts["openai_strict"] == "refuses" and verdicts["llguidance"] == "ok"
    # only xgrammar 0.2.9's length-bounded strings, which take raw control characters
    flagged = [k for k in report["keywords"] if k["status"] in ("ignored", "weakened")]
    assert {k["keyword"] for k in flagged} <= {"minLength", "maxLength"}
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({"type": "object", "properties": {"a": {"type": "integer"}},
                                 "required": ["a"], "additionalProperties": False}))  # fmt: skip
    args = ["doctor", "--schema", str(plain), "--json", "--budget-ms", "1000"]
    assert main([*args, "--backend", "llguidance", "--backend", "vllm"]) == 0
