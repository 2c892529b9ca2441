"""bench/gpu_check.py can only run on a GPU; its checks are device-independent and run here."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from app.engine import Engine
from app.examples import load_examples

SCRIPT = Path(__file__).resolve().parent.parent.parent / "bench" / "gpu_check.py"


def _gpu_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_sampled_repeat_check_passes_on_the_cpu(
    engine: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    nested = next(e for e in load_examples() if e.id == "nested")
    assert _gpu_check().check_sampled_repeat(engine, nested, steps=10) is True
    line = capsys.readouterr().out
    assert line.startswith("ok   nested") and "sampled 10 steps" in line
    assert "repeat after half back True, after all back True, agree True" in line


def test_the_overhead_line_states_the_p50_its_target_and_the_share() -> None:
    module = _gpu_check()
    fast = module.Overhead([0.2, 0.3, 0.9], [0.01, 0.02, 0.03])
    assert fast.line().startswith("time outside the forward pass p50 0.300 ms over 3 steps")
    assert "(target <= 0.5 ms: met), 2.00% of the forward pass" in fast.line()
    slow = module.Overhead([0.6, 0.7], [0.1, 0.1])
    assert "p50 0.650 ms" in slow.line() and "NOT met" in slow.line()
