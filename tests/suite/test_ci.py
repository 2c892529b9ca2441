"""Where people work: the console script from a clean virtualenv, the pre-commit hook's entry and
the documented workflow's ``run:`` steps, each run as written."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

pytestmark = pytest.mark.model

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "tests" / "fixtures" / "suite" / "schemas"
SARIF_SCHEMA = ROOT / "tests" / "fixtures" / "sarif" / "sarif-2.1.0-rtm.5.json"
INSTALL_STEP = "Install maskscope"  # the virtualenv below is that step, from this checkout


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clean virtualenv with the package installed (not editable, from a copy of the
    checkout), its dependencies those of the project's environment; returns its bin folder."""
    where = tmp_path_factory.mktemp("venv")
    source = where / "src"
    source.mkdir()
    shutil.copytree(ROOT / "app", source / "app",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so"))  # fmt: skip
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "venv", where / "v"], check=True)
    site = (
        where / "v" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    )
    (site / "project-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    pip: list[str | Path] = [where / "v" / "bin" / "python", "-m", "pip", "-q"]
    # the virtualenv's own setuptools is older than the project's build needs
    subprocess.run([*pip, "uninstall", "-y", "setuptools"], check=True)
    subprocess.run([*pip, "install", "--no-deps", "--no-build-isolation", "--no-index", source],
                   check=True, cwd=where)  # fmt: skip
    return where / "v" / "bin"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A team's repository: a suite of two schemas (one with an ignored keyword) and its
    maskscope.toml."""
    (tmp_path / "schemas").mkdir()
    for name in ("tags.json", "person.json", "person.tests.jsonl"):
        shutil.copy(SCHEMAS / name, tmp_path / "schemas" / name)
    (tmp_path / "maskscope.toml").write_text('paths = ["schemas"]\nbudget-ms = 20000\n')
    return tmp_path


def _run(command: list[str] | str, venv: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{venv}{os.pathsep}{os.environ['PATH']}",
           "MASKSCOPE_COMPILE_WORKERS": "1"}  # fmt: skip
    shell = ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c"]  # GitHub's `run:` shell
    argv = [*shell, command] if isinstance(command, str) else command
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=280)


def test_the_console_script_is_the_command_line(venv: Path, workspace: Path) -> None:
    done = _run(["maskscope", "check", "--format", "json"], venv, workspace)
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert [c["source"] for c in report["cases"]] == ["schemas/person.json", "schemas/tags.json"]
    assert [f["level"] for f in report["cases"][1]["findings"]] == ["ignored"]
    help_text = _run(["maskscope", "--help"], venv, workspace).stdout
    assert "check" in help_text and "doctor" in help_text


def test_the_pre_commit_hook_runs_as_written(venv: Path, workspace: Path) -> None:
    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hook["language"] == "python" and hook["pass_filenames"] is False
    entry = shlex.split(hook["entry"])
    failed = _run(entry, venv, workspace)
    assert failed.returncode == 1 and "schemas/tags.json:4:3: ignored /uniqueItems" in failed.stdout
    (workspace / "schemas" / "tags.json").unlink()
    clean = _run(entry, venv, workspace)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "1 cases, 0 failing findings" in clean.stdout


def _workflow() -> dict[str, Any]:
    text = (ROOT / "docs" / "ci.md").read_text()
    (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "jobs:" in b]
    workflow: dict[str, Any] = yaml.safe_load(block)
    return workflow


def _steps(job: dict[str, Any], matrix: dict[str, Any]) -> list[str]:
    """The job's ``run:`` steps, ``${{ matrix.X }}`` put in as the runner does."""
    runs = [s["run"] for s in job["steps"] if "run" in s and s.get("name") != INSTALL_STEP]
    return [re.sub(r"\$\{\{\s*matrix\.(\w+)\s*\}\}", lambda m: str(matrix[m[1]]), r) for r in runs]


def test_the_workflows_run_steps_run_as_written(venv: Path, workspace: Path) -> None:
    jobs = _workflow()["jobs"]
    assert [s["name"] for s in jobs["shard"]["steps"] if "run" in s][0] == INSTALL_STEP
    for shard in jobs["shard"]["strategy"]["matrix"]["shard"]:
        for step in _steps(jobs["shard"], {"shard": shard}):
            done = _run(step, venv, workspace)
            assert done.returncode == 0, (step, done.stderr)
    *first, annotate = _steps(jobs["report"], {})
    for step in first:
        assert _run(step, venv, workspace).returncode == 0, step
    sarif = json.loads((workspace / "maskscope.sarif").read_text())
    jsonschema.Draft4Validator(json.loads(SARIF_SCHEMA.read_text())).validate(sarif)
    done = _run(annotate, venv, workspace)
    assert done.returncode == 1  # the merged shards hold a failing finding: the job fails
    assert "::error file=schemas/tags.json,line=4,col=3," in done.stdout
