"""A tools source's ``$model`` parameters over HTTP, on the real model and the real sandbox: every
model derived in one sandbox run (counted by the sandbox pool's jobs and the sandbox's runs), a
missing model still pointed at its ``$model``, and the run of a client that leaves killed, for an
in-process client (its request cancelled) and over a real connection (closed)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from app.engine import Engine
from app.examples import load_tool_examples
from app.main import create_app
from app.settings import Settings
from app.web.runtime.state import AppState
from tests import asyncrun
from tests.conftest import as_page, served
from tests.sandbox.models import (
    SLOW_NAMES,
    gone,
    many_models,
    pydantic_here,
    slow_models,
    wait_for,
)

ROUTER_TOOLS = json.loads(next(e for e in load_tool_examples() if e.id == "router_tools").source())
_SANDBOX_MODULE = b"app.sandbox.runner"


def tools_naming(pydantic: str, names: list[str]) -> dict[str, Any]:
    """A compile request: the router example's builder and format, a tool per model named."""
    data = copy.deepcopy(ROUTER_TOOLS)
    data["tools"] = [
        {"type": "function", "function": {"name": f"tool_{i}", "parameters": {"$model": name}}}
        for i, name in enumerate(names)
    ]
    data["pydantic"] = pydantic
    return {"kind": "tools", "source": json.dumps(data, indent=2)}


def settings(directory: Path) -> Settings:
    # The slow source's run takes seconds: room for it, so that only a kill ends it early.
    return Settings(
        db_path=directory / "p.db", cache_dir=directory, sandbox_cpu_s=60, sandbox_timeout_s=120
    )


def sandbox_jobs(state: AppState) -> dict[str, float]:
    """The sandbox pool's jobs so far, by outcome (``/metrics``' ``maskscope_jobs_total``)."""
    return {
        sample.labels["outcome"]: sample.value
        for family in text_string_to_metric_families(state.metrics.render().decode())
        for sample in family.samples
        if sample.name == "maskscope_jobs_total" and sample.labels["pool"] == "sandbox"
    }


def moved(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}


def sandbox_children() -> list[int]:
    """The pids of this process's sandbox processes (a sandbox run is one)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            parent = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            if parent == os.getpid() and _SANDBOX_MODULE in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
    return found


@pytest.fixture(scope="module")
def app(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> FastAPI:
    return create_app(settings(tmp_path_factory.mktemp("tools-models")), engine=engine)


@pytest.fixture(scope="module")
def state(app: FastAPI) -> AppState:
    found: AppState = app.state.maskscope
    return found


@pytest.fixture(scope="module")
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app) as test_client:
        yield as_page(test_client)


def test_twenty_models_are_derived_in_one_sandbox_run(client: TestClient, state: AppState) -> None:
    source = many_models(20)
    names = [f"M{k}" for k in range(20)]
    jobs, runs = sandbox_jobs(state), state.sandbox.runs
    answer = client.post("/api/compile", json=tools_naming(source, names))
    assert answer.status_code == 200, answer.text
    assert moved(jobs, sandbox_jobs(state)) == {"ok": 1}
    assert state.sandbox.runs - runs == 1
    leaves = {
        tag["begin"]: tag["content"]["json_schema"]
        for tag in answer.json()["structural_tag"]["format"]["tags"]
    }
    expected = pydantic_here(source)
    for i, name in enumerate(names):
        [leaf] = [schema for begin, schema in leaves.items() if f'"tool_{i}"' in begin]
        assert leaf == expected[name]


def test_a_missing_model_is_pointed_at_its_model_after_one_run(
    client: TestClient, state: AppState
) -> None:
    names = [f"M{k}" for k in range(20)]
    names[7] = "Nope"
    jobs = sandbox_jobs(state)
    answer = client.post("/api/compile", json=tools_naming(many_models(20), names))
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["pointer"] == "/tools/7/function/parameters/$model"
    assert "no model named 'Nope'; the source defines M0, M1" in error["message"]
    assert moved(jobs, sandbox_jobs(state)) == {"ok": 1}
    # A source that fails as a whole is still pointed at the pydantic field.
    broken = "from pydantic import BaseModel, Field\n\nclass A(BaseModel):\n"
    broken += "    x: str = Field(..., pattern='[')\n"
    answer = client.post("/api/compile", json=tools_naming(broken, ["A", "A"]))
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["pointer"] == "/pydantic" and "SchemaError" in error["message"]


def _ends_killed(state: AppState, jobs: dict[str, float], pid: int) -> None:
    """The run of ``pid`` was killed, and no other ran: the pool is idle, one job, ended."""
    wait_for(lambda: gone(pid), seconds=30)
    wait_for(lambda: state.pools.sandbox.pending == 0, seconds=120)
    assert moved(jobs, sandbox_jobs(state)) == {"request_ended": 1}


def test_a_cancelled_request_kills_its_sandbox_run(
    engine: Engine, tmp_path_factory: pytest.TempPathFactory
) -> None:
    app = create_app(settings(tmp_path_factory.mktemp("cancelled")), engine=engine)
    state: AppState = app.state.maskscope
    jobs = sandbox_jobs(state)

    async def scenario() -> int:
        lifespan = app.router.lifespan_context(app)
        await lifespan.__aenter__()
        try:
            await asyncio.to_thread(lambda: state.sandbox.level)  # the probe's process is over
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
                body = tools_naming(slow_models(), SLOW_NAMES)
                asking = asyncio.ensure_future(c.post("/api/compile", json=body, timeout=300))
                while not sandbox_children():
                    assert not asking.done(), asking.result().text
                    await asyncio.sleep(0.01)
                [pid] = sandbox_children()
                asking.cancel()  # the in-process client leaves
                with contextlib.suppress(asyncio.CancelledError):
                    await asking
                return pid
        finally:
            await lifespan.__aexit__(None, None, None)

    _ends_killed(state, jobs, asyncrun.run(scenario()))


def _ask_slowly(url: str) -> socket.socket:
    """A raw connection asking to derive the slow models (closing it is the client leaving)."""
    body = json.dumps(tools_naming(slow_models(), SLOW_NAMES)).encode()
    address = urlsplit(url)
    request = (
        f"POST /api/compile HTTP/1.1\r\nHost: {address.netloc}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    connection = socket.create_connection((address.hostname, address.port))
    connection.sendall(request)
    return connection


@pytest.mark.server  # the app under uvicorn (tests/conftest.py served)
def test_a_client_that_disconnects_kills_its_sandbox_run(
    engine: Engine, tmp_path_factory: pytest.TempPathFactory
) -> None:
    app = create_app(settings(tmp_path_factory.mktemp("left")), engine=engine)
    state: AppState = app.state.maskscope
    jobs = sandbox_jobs(state)
    with served(app) as url:
        _ = state.sandbox.level  # the probe's process is over
        with _ask_slowly(url):
            wait_for(lambda: bool(sandbox_children()))
            [pid] = sandbox_children()
        _ends_killed(state, jobs, pid)
