"""Shared fixtures: the real model and compiler, loaded once per test run; real vLLM servers."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.engine import Engine
from app.engine.model import checkpoint_source
from app.main import create_app
from app.settings import Settings
from app.web.security import CSRF_COOKIE, CSRF_HEADER, CsrfSigner
from tests.postgres_server import PostgresServer
from tests.vllm_server import VllmServer

# The in-process client sends `Host: testserver`: the tests' apps answer to it besides the
# default hosts (tests/web/test_security.py checks the defaults without this).
os.environ["MASKSCOPE_ALLOWED_HOSTS"] = "testserver,localhost,127.0.0.1,[::1]"

# vLLM servers the collected tests ask for, started in the background as soon as they are known
# (start-up takes minutes): the default flags (the whole vocabulary's logprobs), and vLLM's
# default cap of 20 logprobs (top-K only).
_VLLM_SERVERS = {
    "vllm_server": ("default", ()),
    "vllm_capped_server": ("capped", ("--max-logprobs", "20")),
}
_VLLM_STARTUP_S = 900.0
_vllm_servers: dict[str, VllmServer] = {}


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected what will not run
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Start the vLLM servers that the collected tests use (each once, in the background), and
    run the tests that use them last, so that they start while the other tests run."""
    items.sort(key=lambda item: item.get_closest_marker("remote") is not None)
    used = {name for item in items for name in getattr(item, "fixturenames", ())}
    wanted = used & set(_VLLM_SERVERS)
    for name in sorted(wanted - set(_vllm_servers)):
        label, flags = _VLLM_SERVERS[name]
        server = VllmServer(
            label, model_dir=checkpoint_source(Settings()), port=free_port(), extra=flags
        )
        server.start()
        _vllm_servers[name] = server


def pytest_sessionfinish() -> None:
    """Stop every vLLM server this session started."""
    for server in _vllm_servers.values():
        server.stop()


def _vllm(name: str) -> VllmServer:
    server = _vllm_servers[name]
    server.wait_ready(_VLLM_STARTUP_S)
    return server


@pytest.fixture(scope="session")
def vllm_server() -> VllmServer:
    """A real ``vllm serve`` of the local model's checkpoint, as ``make vllm`` starts it."""
    return _vllm("vllm_server")


@pytest.fixture(scope="session")
def vllm_capped_server() -> VllmServer:
    """The same, with vLLM's default cap of 20 logprobs a request."""
    return _vllm("vllm_capped_server")


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """One real PostgreSQL server for the whole test session (``postgres_url`` gives each test
    a database of its own)."""
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


@pytest.fixture(scope="session")
def settings() -> Settings:
    """Settings from the environment (the model cache is shared with `make run`)."""
    return Settings(compile_workers=2)


@pytest.fixture(scope="session")
def engine(settings: Settings) -> Iterator[Engine]:
    """The real default model with real xgrammar compile workers."""
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
def live_server(engine: Engine) -> Iterator[str]:
    """The app served by uvicorn in a thread, sharing the test session's engine."""
    yield from serve(Settings(), engine)


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
