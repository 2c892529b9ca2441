"""``--kind tools`` on the command line: replay under the router example's tag, a ``$model``
derived by the sandbox as the server does, and a bad field reported with its pointer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.__main__ import main
from app.examples import EXAMPLES_DIR

# The commands load the real model in this process: the model tier (docs/testing.md)
pytestmark = pytest.mark.model

ROUTER = json.loads((EXAMPLES_DIR / "router_tools.tools.json").read_text(encoding="utf-8"))
CALL = ('<tool_call>\n{"name": "fetch_user_features", "arguments": {"rationale": "look", '
        '"user_id": "u1042"}}\n</tool_call>')  # fmt: skip


@pytest.fixture(autouse=True)
def _one_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MASKSCOPE_COMPILE_WORKERS", "1")


def test_replay_under_a_tools_source_with_a_model_derived(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = json.loads(json.dumps(ROUTER))
    data["pydantic"] = (
        "from pydantic import BaseModel, Field\n\n\nclass Lookup(BaseModel):\n"
        "    rationale: str = Field(..., max_length=160)\n"
        '    user_id: str = Field(..., pattern=r"^u[0-9]{3,8}$")\n'
    )
    data["tools"][0]["function"]["parameters"] = {"$model": "Lookup"}
    source = tmp_path / "router.tools.json"
    source.write_text(json.dumps(data, indent=2))
    flags = ["--schema", str(source), "--kind", "tools"]
    assert main(["replay", *flags, "--text", CALL]) == 0
    assert capsys.readouterr().out.rstrip().endswith("accepted: True; complete: True")
    bad = CALL.replace("u1042", "x1042")
    assert main(["replay", *flags, "--text", bad, "--json"]) == 1
    rejection = json.loads(capsys.readouterr().out)["rejection"]
    assert rejection["offset"] == bad.index("x1042")


def test_a_bad_tools_source_is_reported_with_its_place(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = json.loads(json.dumps(ROUTER))
    data["tool_choice"] = {"type": "function", "function": {"name": "lookup"}}
    source = tmp_path / "bad.json"
    source.write_text(json.dumps(data, indent=2))
    assert main(["replay", "--schema", str(source), "--kind", "tools", "--text", "x"]) == 2
    err = capsys.readouterr().err
    assert "/tool_choice/function/name" in err and "which is no tool" in err
