"""SIGTERM to ``python -m app serve`` while it works: a run streaming, a compile and a Doctor
examination in flight. The process is gone within 10 s, the stream got ``shutdown``, every
request got an answer, and a permalink acknowledged before is there after the restart."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.app_process import AppProcess
from tests.conftest import free_port
from tests.doctor.test_bounds import SLOW

# Real app processes (tests/app_process.py): the server tier (docs/testing.md)
pytestmark = pytest.mark.server

# Long enough to be running when the signal comes: a string of 3000 characters at least, a
# Doctor given 20 s, a regex whose automaton takes seconds to build.
_LONG_RUN = {
    "grammar": {"kind": "json_schema", "source": json.dumps({"type": "string", "minLength": 3000})},
    "raw_prompt": "A long string: ",
    "max_tokens": 4000,
}
_DOCTOR = {"grammar": {"kind": "json_schema", "source": json.dumps(SLOW)}, "budget_ms": 20000}
# About 2.4 s of compile on an idle machine: still compiling when the SIGTERM comes. Each bound
# differs, or xgrammar builds the repeated rule once (three equal ones took 0.2 s, and that
# compile sometimes ended before the server began to stop).
_SLOW_COMPILE = {
    "kind": "regex",
    "source": "".join(f"[{'a-z' if i % 2 else '0-9'}]{{1,{3000 - i}}}" for i in range(24)),
}
_PERMALINK = {
    "grammar": {"kind": "regex", "source": "(yes|no)"},
    "raw_prompt": "Answer: ",
    "max_tokens": 3,
    "actions": [{"op": "step", "n": 1}],
}


class _Call(threading.Thread):
    """A request made on a thread of its own; its answer (or the error) is kept."""

    def __init__(self, call: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self.call = call
        self.result: Any = None
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            self.result = self.call()
        except BaseException as error:  # reported by the test
            self.error = error


def _stream(url: str, started: threading.Event) -> list[str]:
    """The SSE event names of a stream, read until it closes."""
    events: list[str] = []
    with httpx.stream("GET", url, timeout=httpx.Timeout(60, read=60)) as answer:
        for line in answer.iter_lines():
            if line.startswith("event: "):
                events.append(line.removeprefix("event: "))
                if events.count("step") == 2:
                    started.set()
    return events


def _running(base: str) -> dict[str, float]:
    """``maskscope_queue_running`` by pool, from ``/metrics``."""
    running = {}
    for line in httpx.get(f"{base}/metrics").text.splitlines():
        if line.startswith("maskscope_queue_running{"):
            pool = line.split('pool="')[1].split('"')[0]
            running[pool] = float(line.rsplit(" ", 1)[1])
    return running


def test_sigterm_with_work_in_flight_exits_soon_and_loses_no_permalink(tmp_path: Path) -> None:
    env = {"MASKSCOPE_DB_PATH": str(tmp_path / "permalinks.sqlite")}
    app = AppProcess("sigterm", port=free_port(), env=env)
    app.start()
    try:
        base = app.url
        stored = httpx.post(f"{base}/api/permalinks", json=_PERMALINK, timeout=60)
        assert stored.status_code == 201, stored.text
        snapshot_id = stored.json()["id"]

        session = httpx.post(f"{base}/api/sessions", json=_LONG_RUN, timeout=60).json()["id"]
        streaming = threading.Event()
        stream = _Call(
            lambda: _stream(f"{base}/api/sessions/{session}/events?format=json", streaming)
        )
        assert streaming.wait(60), "the run did not stream"
        doctor = _Call(lambda: httpx.post(f"{base}/api/doctor", json=_DOCTOR, timeout=60))
        compiling = _Call(lambda: httpx.post(f"{base}/api/compile", json=_SLOW_COMPILE, timeout=60))
        deadline = time.monotonic() + 30
        while not (_running(base).get("doctor") and _running(base).get("compile")):
            assert time.monotonic() < deadline, f"not both running: {_running(base)}"
            time.sleep(0.05)

        app.terminate()
        app.wait(timeout_s=10)
        for call in (stream, doctor, compiling):
            call.join(timeout=5)
            assert not call.is_alive()
    finally:
        app.stop()

    assert stream.error is None, stream.error
    events: list[str] = stream.result
    assert events[-1] == "shutdown" and "end" not in events, events
    # Every request in flight got an answer: the compile was cancelled (503 shutting_down); the
    # Doctor's connection was answered or closed by the server, never left hanging.
    assert compiling.error is None, compiling.error
    assert compiling.result.status_code == 503, compiling.result.text
    assert compiling.result.json()["error"]["code"] == "shutting_down"
    assert doctor.error is None or isinstance(doctor.error, httpx.TransportError)
    assert "Waiting for background tasks" not in app.log_tail(200)

    again = AppProcess("sigterm-restart", port=free_port(), env=env)
    again.start()
    try:
        reopened = httpx.get(f"{again.url}/api/permalinks/{snapshot_id}")
        assert reopened.status_code == 200, reopened.text
        assert reopened.json()["id"] == snapshot_id
    finally:
        again.stop()


def _runners(directory: Path) -> set[int]:
    """The ids of the stacks' runner processes listening under ``directory``."""
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0") if entry.name.isdigit() else []
        except OSError:  # gone meanwhile
            continue
        if any(p.endswith(b"vllm_runner.py") for p in command) and str(
            directory
        ).encode() in b" ".join(command):
            found.add(int(entry.name))
    return found


def test_sigterm_stops_the_stack_runners_the_server_started(
    tmp_path: Path, runner_dir: Path
) -> None:
    # this server's runners alone: no other process's runner is reused
    env = {
        "MASKSCOPE_DB_PATH": str(tmp_path / "p.sqlite"),
        "MASKSCOPE_STACK_RUNNER_DIR": str(runner_dir),
    }
    app = AppProcess("sigterm-stacks", port=free_port(), env=env)
    app.start()
    body = {"grammar": {"kind": "regex", "source": "(yes|no)"}, "text": "yes",
            "model": "qwen3.6", "stack": "vllm-0.34.0"}  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while (
            answer := httpx.post(f"{app.url}/api/replay", json=body, timeout=240)
        ).status_code == 503:
            assert time.monotonic() < deadline, answer.text  # the tokenizer still loading
            time.sleep(0.5)
        assert answer.status_code == 200, answer.text
        assert answer.json()["mask_by"]["stack"] == "vllm-0.34.0"
        assert _runners(runner_dir), "the replay ran in no runner of this server's"
        app.terminate()
        app.wait(timeout_s=30)
    finally:
        app.stop()
    deadline = time.monotonic() + 10
    while _runners(runner_dir) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _runners(runner_dir), "a runner outlived the server that started it"
