"""The stacks listed, each read in its own process; one warm runner per stack, shared by every
CLI call of the user (issue #40, items 1 and 2).

Real stacks throughout (``make stacks``); a release whose internal entry point moved is the real
0.34.0 tree with one module taken away (linked file by file, the rest untouched).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.engine.grammars.tools.vllm_socket import SocketRunner
from app.engine.stack_pins import MARKER
from app.engine.stacks import close_runners, stack_infos
from app.settings import Settings
from tests.vllm_oracle import STACK_PATHS, VLLM_PYTHON, run_vllm

ROOT = Path(__file__).resolve().parents[3]
VERSIONS = """
import importlib.metadata, json, vllm
names = ("xgrammar", "llguidance", "transformers")
print(json.dumps({"vllm": vllm.__version__, **{n: importlib.metadata.version(n) for n in names}}))
"""


@pytest.fixture
def runners(runner_dir: Path) -> Iterator[Path]:
    assert VLLM_PYTHON.exists(), f"{VLLM_PYTHON} is missing: run `make vllm-install`"
    assert STACK_PATHS["vllm-0.34.0"][0].is_dir(), "vLLM 0.34.0 is missing: run `make stacks`"
    yield runner_dir
    close_runners()
    for socket_dir in runner_dir.glob("*"):
        found = SocketRunner.attach(socket_dir, 60)
        if found is not None:  # a CLI call's runner: it outlives the call, by design
            found.kill()


def _settings(runners: Path, **fields: object) -> Settings:
    given = {"stacks_dir": STACK_PATHS["vllm-0.34.0"][0].parent, **fields}
    return Settings(
        vllm_python=VLLM_PYTHON,
        vllm_timeout_s=600,
        stack_runner_dir=runners,
        **given,  # type: ignore[arg-type]
    )


def test_each_stack_lists_the_versions_its_own_process_imports(runners: Path) -> None:
    infos = {info.id: info for info in stack_infos(_settings(runners))}
    assert list(infos) == ["maskscope", "vllm-0.32.0", "vllm-0.34.0"]
    for name in ("vllm-0.32.0", "vllm-0.34.0"):
        assert infos[name].available and infos[name].reason is None
        assert infos[name].versions == run_vllm(VERSIONS, None, stack=name)
    assert infos["vllm-0.32.0"].versions["vllm"] == "0.32.0"
    assert infos["vllm-0.34.0"].versions["vllm"] == "0.34.0"
    assert infos["vllm-0.32.0"].forward and not infos["vllm-0.34.0"].forward
    assert infos["maskscope"].available and "vllm" not in infos["maskscope"].versions


def test_a_release_whose_entry_point_moved_is_unavailable_with_the_import_error(
    runners: Path, tmp_path: Path
) -> None:
    target = tmp_path / "stacks" / "vllm-moved"
    target.mkdir(parents=True)
    subprocess.run(
        ["cp", "-rs", str(STACK_PATHS["vllm-0.34.0"][0] / "vllm"), str(target)], check=True
    )
    (target / "vllm" / "parser" / "parser_manager.py").unlink()  # "moved" in this release
    (target / MARKER).write_text("vllm==0.34.0\n")
    lines = ["vllm-0.32.0=vllm_python", "vllm-moved=vllm==0.34.0 over vllm-0.32.0"]
    settings = _settings(runners, stacks=lines, stacks_dir=tmp_path / "stacks")
    moved = {info.id: info for info in stack_infos(settings)}["vllm-moved"]
    assert not moved.available and moved.versions == {}
    assert moved.reason and "No module named 'vllm.parser.parser_manager'" in moved.reason
    assert str(tmp_path) not in moved.reason
    shutil.rmtree(target)
    missing = {info.id: info for info in stack_infos(settings)}["vllm-moved"]
    assert not missing.available and missing.reason
    assert "make stacks" in missing.reason


def _cli(runners: Path) -> list[dict[str, object]]:
    env = {
        **os.environ,
        "MASKSCOPE_STACK_RUNNER_DIR": str(runners),
        "MASKSCOPE_VLLM_PYTHON": str(VLLM_PYTHON),
        "MASKSCOPE_VLLM_TIMEOUT_S": "600",
        "MASKSCOPE_STACKS_DIR": str(STACK_PATHS["vllm-0.34.0"][0].parent),
    }
    done = subprocess.run(
        [sys.executable, "-m", "app", "stacks", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows: list[dict[str, object]] = json.loads(done.stdout.strip().splitlines()[-1])
    return rows


def test_a_second_cli_call_reuses_each_stacks_runner(runners: Path) -> None:
    first = {row["id"]: row for row in _cli(runners)}
    second = {row["id"]: row for row in _cli(runners)}
    for name in ("vllm-0.32.0", "vllm-0.34.0"):
        assert first[name]["runner"] == second[name]["runner"], name
        runner = second[name]["runner"]
        assert isinstance(runner, dict) and runner["starts"] == 1 and runner["pid"]
    assert first["vllm-0.32.0"]["runner"] != first["vllm-0.34.0"]["runner"]
    listed = sorted(p.name for p in runners.iterdir())
    assert len(listed) == 2 and all(oct(p.stat().st_mode)[-3:] == "700" for p in runners.iterdir())
