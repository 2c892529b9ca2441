"""``MASKSCOPE_STACKS`` lines: a release is one line; a bad line is a 4xx naming its index."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.engine.stack_pins import MARKER, configured
from app.exceptions import InvalidInput
from app.settings import Settings


def test_the_default_ships_0_32_0_and_0_34_0_layered_over_it(tmp_path: Path) -> None:
    python = tmp_path / "venv" / "bin" / "python"
    stacks = configured(Settings(vllm_python=python, stacks_dir=tmp_path / "stacks"))
    assert list(stacks) == ["vllm-0.32.0", "vllm-0.34.0"]
    old, new = stacks["vllm-0.32.0"], stacks["vllm-0.34.0"]
    assert old.python == python and not old.layered and old.paths == ()
    assert new.python == python and new.pins == ("vllm==0.34.0",) and new.over == "vllm-0.32.0"
    assert new.paths == (tmp_path / "stacks" / "vllm-0.34.0",)


def test_a_new_release_is_one_line_and_says_what_is_missing(tmp_path: Path) -> None:
    python = tmp_path / "bin" / "python"
    python.parent.mkdir()
    python.write_text("")
    lines = ["base=vllm_python", "vllm-0.35.0=vllm==0.35.0 xgrammar==0.2.9 over base"]
    settings = Settings(vllm_python=python, stacks=lines, stacks_dir=tmp_path / "s")
    stack = configured(settings)["vllm-0.35.0"]
    assert stack.pins == ("vllm==0.35.0", "xgrammar==0.2.9")
    assert stack.missing() == "vllm-0.35.0 is not installed (vllm==0.35.0 xgrammar==0.2.9)"
    (tmp_path / "s" / "vllm-0.35.0").mkdir(parents=True)
    (tmp_path / "s" / "vllm-0.35.0" / MARKER).write_text("vllm==0.35.0\nxgrammar==0.2.9\n")
    assert stack.missing() is None


@pytest.mark.parametrize(
    ("lines", "index", "says"),
    [
        (["no-equals-sign"], 0, "NAME=vllm_python"),
        (["maskscope=vllm_python"], 0, "not 'maskscope'"),
        (["a=vllm_python", "a=vllm_python"], 1, "twice"),
        (["a=vllm_python", "b=vllm over a"], 1, "not a pin"),
        (["b=vllm==0.34.0 over a"], 0, "not an earlier stack"),
        (["a=vllm_python", "b=vllm==1 over a", "c=vllm==2 over b"], 2, "not an earlier stack"),
        (["a=vllm==0.34.0"], 0, "PIN [PIN...] over BASE"),
    ],
)
def test_a_bad_line_is_refused_with_its_index(lines: list[str], index: int, says: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        configured(Settings(stacks=lines))
    assert caught.value.pointer == f"/stacks/{index}"
    assert says in caught.value.message
