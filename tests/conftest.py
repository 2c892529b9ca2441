"""Shared fixtures: the real model and compiler, loaded once per test run."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn

from app.engine import Engine
from app.main import create_app
from app.settings import Settings


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


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def live_server(engine: Engine) -> Iterator[str]:
    """The app served by uvicorn in a thread, sharing the test session's engine."""
    port = free_port()
    config = uvicorn.Config(create_app(Settings(), engine=engine), port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)
