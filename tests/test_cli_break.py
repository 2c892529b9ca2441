"""``python -m app trace --break``: the nested example under llguidance, with a long id in the
prompt, stops on the runaway number before ``max_tokens`` (the real model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.__main__ import main

# The command loads the real model in this process: the model tier (docs/testing.md)
pytestmark = pytest.mark.model

ROOT = Path(__file__).resolve().parent.parent
NESTED = ROOT / "schemas" / "nested.json"
PROMPT = (
    "Create the account of user 314159265358979323846264338327950288419716939937510, "
    "Ada Lovelace, who prefers a dark theme."
)
STEPS = 120


@pytest.fixture(autouse=True)
def _one_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MASKSCOPE_COMPILE_WORKERS", "1")


def _digit_run_ends(steps: list[dict[str, object]], k: int) -> list[int]:
    """The steps ending a run of ``k`` tokens each made of digits only, from the records."""
    digits = [str(s["token_text"]).isdigit() for s in steps]
    return [i for i in range(k - 1, len(steps)) if all(digits[i - k + 1 : i + 1])]


def test_the_nested_example_under_llguidance_stops_on_a_runaway_number(
    capsys: pytest.CaptureFixture[str],
) -> None:
    command = ["trace", "--schema", str(NESTED), "--prompt", PROMPT, "--schema-in-prompt",
               "--system", "You manage user accounts. Reply with JSON only.",
               "--engine", "llguidance", "--steps", str(STEPS), "--json",
               "--break", "runaway_number"]  # fmt: skip
    assert main(command) == 1  # stopped: the output is not complete
    captured = capsys.readouterr()
    lines = [json.loads(line) for line in captured.out.splitlines()]
    steps, last = lines[:-1], lines[-1]
    assert last["stop_reason"] is None and not last["done"] and len(steps) < STEPS
    ends = _digit_run_ends(steps, 16)
    assert ends == [len(steps) - 1]  # where the run of 16 digits is first complete, not before
    assert f"break at step {len(steps) - 1}: runaway_number k=16" in captured.err


def test_a_bad_break_is_refused_with_its_reason(capsys: pytest.CaptureFixture[str]) -> None:
    command = ["trace", "--schema", str(NESTED), "--prompt", "x", "--break", "path"]
    assert main(command) == 2
    assert "--break 'path': a path breakpoint needs a value" in capsys.readouterr().err
