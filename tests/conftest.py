"""Shared fixtures: the real model and compiler, loaded once per test run; real vLLM servers."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.engine import Engine
from app.engine.factories.tokenizer_only import TokenizerModel, open_tokenizer
from app.engine.grammars.tools.vllm_socket import SocketRunner
from app.engine.model.loading import checkpoint_source
from app.engine.stacks import close_runners
from app.main import create_app
from app.settings import Settings
from app.web.middleware.security import CSRF_COOKIE, CSRF_HEADER, CsrfSigner
from tests.parallel import GroupScheduling, group_of, groups_file
from tests.postgres_server import PostgresServer
from tests.tiers import ModelGuard, excludes, mark_by_fixtures, refuse_outside_tier
from tests.vllm_server import VllmServer

# The in-process client sends `Host: testserver`: the tests' apps answer to it besides the
# default hosts (tests/web/middleware/test_security.py checks the defaults without this).
os.environ["MASKSCOPE_ALLOWED_HOSTS"] = "testserver,localhost,127.0.0.1,[::1]"
# The servers the tests start load what they test, not every tokenizer and vLLM's builder at
# start (a warm-up is 30-70 s of CPU and gigabytes a server); a test of the warm-up sets it.
os.environ.setdefault("MASKSCOPE_WARM_UP", "false")
# Every stack runner of the run listens in one directory of the run's: a test, or a command or
# server it starts, finds warm the stacks an earlier test started (each start imports vLLM, 15 to
# 25 s), and never a runner another run left. A run with server tests starts them at once, in a
# command of their own (`python -m app stacks`), so that no test's builder owns them: closing an
# app or a builder stops the runners it started. The tests of a runner's own start and stop give
# it their own directory. :func:`pytest_unconfigure` stops them all.
ROOT = Path(__file__).resolve().parent.parent
RUNNER_DIR = Path(tempfile.mkdtemp(prefix="runners-"))
os.environ["MASKSCOPE_STACK_RUNNER_DIR"] = str(RUNNER_DIR)
_warming: list[subprocess.Popen[bytes]] = []

# vLLM servers the collected tests ask for (start-up takes minutes): the default flags (the whole
# vocabulary's logprobs), and vLLM's default cap of 20 logprobs (top-K only).
_VLLM_SERVERS = {
    "vllm_server": ("default", ()),
    "vllm_capped_server": ("capped", ("--max-logprobs", "20")),
}
_VLLM_STARTUP_S = 900.0
# What one test on a vLLM server may take once the server is up (pytest-timeout).
_VLLM_TEST_S = 300.0
_vllm_servers: dict[str, VllmServer] = {}
# The servers a serial run's tests want, not started yet; the share of the other tests left when
# they start, and the test they start with (else with the first test on one).
_pending: list[str] = []
_VLLM_EARLY = 0.05
_late_start: list[str] = []
# Under pytest-xdist (`make test` runs 2 workers) the controller process owns the vLLM servers,
# so that none stops while a worker still uses it: the workers write the servers their tests
# want to this directory, and the controller writes back each server's port and pid.
_SHARED_DIR_KEY = "maskscope_shared_dir"
_shared_dirs: list[Path] = []
# Every test on a vLLM server runs in one worker, one after the other (one server per session;
# some stop its proxy or change what it serves).
_REMOTE_GROUP = "remote"


def _uses_vllm(item: pytest.Item) -> bool:
    fixtures = set(getattr(item, "fixturenames", ()))
    return item.get_closest_marker("remote") is not None or bool(fixtures & set(_VLLM_SERVERS))


def pytest_itemcollected(item: pytest.Item) -> None:
    """Mark each test with the tiers its fixtures need (tests/tiers.py), before ``-m`` reads
    them; put every test on a vLLM server in one xdist group, under a time limit that covers the
    server's start."""
    mark_by_fixtures(item)
    if _uses_vllm(item):
        item.add_marker(pytest.mark.xdist_group(_REMOTE_GROUP))
        item.add_marker(pytest.mark.timeout(_VLLM_STARTUP_S + _VLLM_TEST_S))


_MODEL_GUARD = pytest.StashKey[ModelGuard]()


def pytest_configure(config: pytest.Config) -> None:
    """In a run that deselects ``model`` (``make test-fast``), refuse the real model's weights."""
    if excludes(config, "model"):
        guard = ModelGuard()
        guard.install()
        config.stash[_MODEL_GUARD] = guard


def pytest_unconfigure(config: pytest.Config) -> None:
    """Undo :func:`pytest_configure`'s guard; stop the stacks' runners of the run, this
    process's and those its commands left (they would idle on for
    ``MASKSCOPE_STACK_RUNNER_IDLE_S`` after the run)."""
    _stop_run_runners()
    shutil.rmtree(RUNNER_DIR, ignore_errors=True)
    if _MODEL_GUARD in config.stash:
        config.stash[_MODEL_GUARD].uninstall()


def _warm_run_runners(items: list[pytest.Item]) -> None:
    """Start the stacks' runners in :data:`RUNNER_DIR`, in the background, when a server test
    will run (the stacks' tests are marked ``server``)."""
    if any(item.get_closest_marker("server") is not None for item in items):
        command = [sys.executable, "-m", "app", "stacks"]
        out = subprocess.DEVNULL
        _warming.append(subprocess.Popen(command, stdout=out, stderr=out, cwd=ROOT))


def _stop_run_runners() -> None:
    """Stop every runner in :data:`RUNNER_DIR`: this process's, and those its commands left."""
    for command in _warming:
        command.kill()
        command.wait()
    _warming.clear()
    close_runners()
    for directory in RUNNER_DIR.glob("*"):
        found = SocketRunner.attach(directory, 60)
        if found is not None:
            found.kill()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Fail a test that loaded the real model in a run that deselects ``model``."""
    report = yield
    if _MODEL_GUARD in item.config.stash:
        item.config.stash[_MODEL_GUARD].check(report)
    return report


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected what will not run
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the tests on a vLLM server last, and note the servers they use: under xdist the
    controller starts them at once, in the background, and the remote tests run halfway, on one
    worker while the other runs the rest; in one process they start near the others' end."""
    items.sort(key=_uses_vllm)
    used = {name for item in items for name in getattr(item, "fixturenames", ())}
    wanted = sorted(used & set(_VLLM_SERVERS))
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    if workerinput is not None:  # an xdist worker: the controller schedules and starts them
        items[:] = _remote_halfway(items)
        shared = Path(workerinput[_SHARED_DIR_KEY])
        groups = {item.nodeid: group for item in items if (group := group_of(item)) is not None}
        _write_json(groups_file(shared), groups)
        _write_json(shared / "wanted.json", wanted)
        _warm_run_runners(items)
        return
    # In one process the servers start near the end of the other tests, not at collection: two
    # idle servers hold ~7 GB, which the other tests need (CI's run was killed by the kernel
    # with them held for an hour); their start-up, a minute or two, overlaps the last tests.
    _pending[:] = wanted
    others = [item for item in items if not _uses_vllm(item)]
    if wanted and others:
        _late_start[:] = [others[int(len(others) * (1 - _VLLM_EARLY))].nodeid]
    _warm_run_runners(items)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Start the servers a serial run's tests want when it reaches :data:`_late_start`'s test."""
    if _late_start and item.nodeid == _late_start[0] and _pending:
        _stop_run_runners()  # the servers need their memory; a later test restarts its stack
        _start_vllm_servers(list(_pending))
        _pending.clear()


def _remote_halfway(items: list[pytest.Item]) -> list[pytest.Item]:
    """``items`` (the remote ones last) with the remote ones moved to the first module boundary
    past half of the others: the order in which the scheduler hands out the work units."""
    remote = [item for item in items if _uses_vllm(item)]
    others = items[: len(items) - len(remote)]
    cut = len(others) // 2
    while 0 < cut < len(others) and others[cut].path == others[cut - 1].path:
        cut += 1
    return others[:cut] + remote + others[cut:]


def _start_vllm_servers(names: list[str]) -> None:
    for name in sorted(set(names) - set(_vllm_servers)):
        label, flags = _VLLM_SERVERS[name]
        server = VllmServer(
            label, model_dir=checkpoint_source(Settings()), port=free_port(), extra=flags
        )
        server.start()
        _vllm_servers[name] = server


def _write_json(path: Path, value: Any) -> None:
    """Write ``value`` to ``path`` at once (a reader never sees half of it)."""
    partial = path.with_name(f"{path.name}.{os.getpid()}")
    partial.write_text(json.dumps(value))
    os.replace(partial, path)


def _shared_dir() -> Path:
    if not _shared_dirs:
        _shared_dirs.append(Path(tempfile.mkdtemp(prefix="maskscope-xdist-")))
    return _shared_dirs[0]


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """(xdist controller) Tell each worker the directory it shares with the controller."""
    node.workerinput[_SHARED_DIR_KEY] = str(_shared_dir())


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> GroupScheduling | None:
    """(xdist controller) ``--dist loadgroup``: :class:`tests.parallel.GroupScheduling`."""
    if config.getvalue("dist") != "loadgroup":
        return None
    return GroupScheduling(config, log, _shared_dir())


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: Any) -> None:
    """(xdist controller) Start the vLLM servers the workers' tests want, once, before any test
    runs, and tell the workers where they are."""
    shared = _shared_dir()
    wanted = shared / "wanted.json"
    if not wanted.exists():  # a worker whose collection failed
        return
    names: list[str] = json.loads(wanted.read_text())
    _start_vllm_servers(names)
    for name in names:
        server = _vllm_servers[name]
        _write_json(shared / f"{name}.json", {"port": server.port, "pid": server.pid})


def pytest_sessionfinish() -> None:
    """Stop every vLLM server this session started."""
    for server in _vllm_servers.values():
        server.stop()
    for shared in _shared_dirs:
        shutil.rmtree(shared, ignore_errors=True)


def _vllm(request: pytest.FixtureRequest, name: str) -> VllmServer:
    refuse_outside_tier(request.config, "remote", "a vLLM server")
    workerinput: dict[str, Any] | None = getattr(request.config, "workerinput", None)
    if workerinput is not None and name not in _vllm_servers:  # started by the controller
        label, flags = _VLLM_SERVERS[name]
        where = json.loads((Path(workerinput[_SHARED_DIR_KEY]) / f"{name}.json").read_text())
        _vllm_servers[name] = VllmServer.attach(
            label, model_dir=checkpoint_source(Settings()), port=where["port"],
            pid=where["pid"], extra=flags,
        )  # fmt: skip
    elif name not in _vllm_servers:  # one process: every server its tests want, started now
        _start_vllm_servers(sorted({*_pending, name}))
        _pending.clear()
    server = _vllm_servers[name]
    server.wait_ready(_VLLM_STARTUP_S)
    return server


@pytest.fixture(scope="session")
def vllm_server(request: pytest.FixtureRequest) -> VllmServer:
    """A real ``vllm serve`` of the local model's checkpoint, as ``make vllm`` starts it."""
    return _vllm(request, "vllm_server")


@pytest.fixture(scope="session")
def vllm_capped_server(request: pytest.FixtureRequest) -> VllmServer:
    """The same, with vLLM's default cap of 20 logprobs a request."""
    return _vllm(request, "vllm_capped_server")


@pytest.fixture(scope="session")
def postgres(request: pytest.FixtureRequest) -> Iterator[PostgresServer]:
    """One real PostgreSQL server for the whole test session (``postgres_url`` gives each test
    a database of its own)."""
    refuse_outside_tier(request.config, "server", "a PostgreSQL server")
    server = PostgresServer(free_port())
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres: PostgresServer) -> str:
    """A new empty database on the session's PostgreSQL server: its URL."""
    return postgres.new_database()


@pytest.fixture
def runner_dir() -> Iterator[Path]:
    """A directory for stack runners' sockets, short enough for a unix socket's path (108 bytes:
    a test's ``tmp_path``, five directories deep, is not, once pytest's run count grows)."""
    directory = Path(tempfile.mkdtemp(prefix="runners-"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def settings() -> Settings:
    """Settings from the environment (the model cache is shared with `make run`)."""
    return Settings(compile_workers=2)


def _tokenizer_engine(settings: Settings, name: str) -> Iterator[Engine[TokenizerModel]]:
    engine = open_tokenizer(settings, name)
    assert engine is not None
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def qwen(settings: Settings) -> Iterator[Engine[TokenizerModel]]:
    """The shipped qwen3.6 tokenizer's engine (no forward pass) on the ``settings`` its
    module uses, closed after the module."""
    yield from _tokenizer_engine(settings, "qwen3.6")


@pytest.fixture(scope="module")
def deepseek(settings: Settings) -> Iterator[Engine[TokenizerModel]]:
    """The shipped deepseek-v4 tokenizer's engine, as :func:`qwen`."""
    yield from _tokenizer_engine(settings, "deepseek-v4")


@pytest.fixture(scope="session")
def engine(settings: Settings, request: pytest.FixtureRequest) -> Iterator[Engine]:
    """The real default model with real xgrammar compile workers (marks its tests ``model``)."""
    refuse_outside_tier(request.config, "model", "the real model (the `engine` fixture)")
    loaded = Engine.load(settings)
    yield loaded
    loaded.close()


def as_page(client: TestClient) -> TestClient:
    """``client`` with what the page sends: its CSRF cookie and the matching token header."""
    signer: CsrfSigner = client.app.state.csrf_signer  # type: ignore[attr-defined]
    nonce = signer.new_nonce()
    client.cookies.set(CSRF_COOKIE, nonce)
    client.headers[CSRF_HEADER] = signer.token(nonce)
    return client


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def live_server(
    engine: Engine, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[str]:
    """The app served by uvicorn in a thread, sharing the test session's engine (its own
    permalink database: the user's default one is never touched)."""
    refuse_outside_tier(request.config, "server", "a live server")
    db_path = tmp_path_factory.mktemp("live-server") / "permalinks.db"
    yield from serve(Settings(db_path=db_path), engine)


def serve(settings: Settings, engine: Engine) -> Iterator[str]:
    """An app with ``settings`` around ``engine``, served by uvicorn in a thread: its root URL,
    until the generator is closed (a fixture's body)."""
    with served(create_app(settings, engine=engine)) as url:
        yield url


@contextmanager
def served(app: FastAPI) -> Iterator[str]:
    """``app`` served by uvicorn in a thread on 127.0.0.1: its root URL, until the block ends."""
    port = free_port()
    # As `python -m app serve`: no X-Forwarded-* from loopback unless MASKSCOPE_TRUSTED_PROXIES.
    config = uvicorn.Config(app, port=port, log_level="warning", proxy_headers=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
