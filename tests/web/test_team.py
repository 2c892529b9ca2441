"""A team's deployment, for real: two ``python -m app serve`` replicas on one PostgreSQL, the
refusal to start a replica without a secret, and kill -9 during a burst of permalink writes on
each store (every permalink answered 201 before the kill is there after the restart)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.web.middleware.security import CSRF_COOKIE, CSRF_HEADER
from tests.app_process import ROOT, AppProcess
from tests.postgres_server import PostgresServer
from tests.web.conftest import session_body

# Real app processes (tests/app_process.py): the server tier (docs/testing.md)
pytestmark = pytest.mark.server

SECRET = "the-team-secret-0123456789abcdef"
#: A compile worker each: several servers share the machine.
_ONE_COMPILER = {"MASKSCOPE_COMPILE_WORKERS": "1"}


@pytest.fixture(scope="module")
def replicas(postgres: PostgresServer) -> Iterator[tuple[AppProcess, AppProcess]]:
    """Replicas ``alpha`` and ``beta``: the same secret, the same database."""
    env = {"MASKSCOPE_DB_URL": postgres.new_database(), "MASKSCOPE_SECRET": SECRET, **_ONE_COMPILER}
    pair = tuple(
        AppProcess(name, env={**env, "MASKSCOPE_REPLICA_ID": name}) for name in ("alpha", "beta")
    )
    try:
        for server in pair:
            server.start(wait=False)
        for server in pair:
            server.wait_ready()
        yield pair[0], pair[1]
    finally:
        for server in pair:
            server.stop()


def test_a_replica_id_without_a_secret_refuses_to_start(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "MASKSCOPE_SECRET"}
    env |= {"MASKSCOPE_REPLICA_ID": "alpha", "MASKSCOPE_DB_PATH": str(tmp_path / "p.db")}
    done = subprocess.run([sys.executable, "-m", "app", "serve", "--port", "9"], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2
    assert "MASKSCOPE_REPLICA_ID is set ('alpha') but MASKSCOPE_SECRET is not" in done.stderr
    assert "Maskscope is starting" not in done.stdout and not (tmp_path / "p.db").exists()


def test_a_permalink_made_on_one_replica_opens_on_the_other(
    replicas: tuple[AppProcess, AppProcess],
) -> None:
    alpha, beta = replicas
    body = {**session_body(max_tokens=12), "actions": [{"op": "step", "n": 6}]}
    made = httpx.post(f"{alpha.url}/api/permalinks", json=body, timeout=120)
    assert made.status_code == 201
    snapshot_id = made.json()["id"]
    there = httpx.get(f"{beta.url}/api/permalinks/{snapshot_id}", timeout=120)
    assert there.status_code == 200 and there.json()["actions"] == [{"op": "step", "n": 6}]
    assert there.json()["differences"] == []
    again = httpx.post(f"{beta.url}/api/permalinks", json=body, timeout=120)
    assert again.status_code == 200 and again.json()["id"] == snapshot_id  # one shared store
    reopened = httpx.post(f"{beta.url}/api/permalinks/{snapshot_id}/session", timeout=120).json()
    assert reopened["id"].startswith("beta.") and len(reopened["steps"]) == 6
    assert httpx.get(f"{beta.url}/s/{snapshot_id}", timeout=120).status_code == 200


def _page_token(server: AppProcess) -> tuple[str, str]:
    """The CSRF cookie and token a page served by ``server`` carries."""
    page = httpx.get(f"{server.url}/", timeout=60)
    found = re.search(r'<meta name="csrf-token" content="([^"]+)">', page.text)
    assert found and CSRF_COOKIE in page.cookies
    return page.cookies[CSRF_COOKIE], found.group(1)


def test_a_session_sent_to_the_wrong_replica_gets_421_naming_the_holder(
    replicas: tuple[AppProcess, AppProcess],
) -> None:
    alpha, beta = replicas
    opened = httpx.post(f"{alpha.url}/api/sessions", json=session_body(max_tokens=4), timeout=120)
    session_id = opened.json()["id"]
    assert re.fullmatch(r"alpha\.[A-Za-z0-9_-]{16}", session_id)
    answers = [
        httpx.get(f"{beta.url}/api/sessions/{session_id}", timeout=60),
        httpx.post(f"{beta.url}/api/sessions/{session_id}/step", json={"n": 1}, timeout=60),
        httpx.get(f"{beta.url}/api/sessions/{session_id}/events", timeout=60),
    ]
    for answer in answers:
        assert answer.status_code == 421, answer.text
        error = answer.json()["error"]
        assert error["code"] == "wrong_replica"
        assert (
            f"session {session_id!r} is held by replica 'alpha', and this is replica 'beta'"
            in (error["message"])
        )
    # The page alpha served carries a CSRF token beta verifies (one secret): beta answers 421,
    # not 403, and the session stays alpha's, untouched.
    cookie, token = _page_token(alpha)
    page = httpx.post(f"{beta.url}/ui/sessions/{session_id}/step", cookies={CSRF_COOKIE: cookie},
                      headers={CSRF_HEADER: token, "HX-Request": "true"}, timeout=60)  # fmt: skip
    assert page.status_code == 421 and "held by replica &#39;alpha&#39;" in page.text
    assert httpx.get(f"{alpha.url}/api/sessions/{session_id}", timeout=60).json()["steps"] == []
    stepped = httpx.post(f"{alpha.url}/api/sessions/{session_id}/step", json={"n": 2}, timeout=60)
    assert stepped.status_code == 200 and len(stepped.json()["steps"]) == 2


def _burst(
    url: str, acknowledged: list[tuple[str, str]], worker: int, stop: threading.Event
) -> None:
    """Share distinct permalinks until the server dies; keep each one answered 201."""
    with httpx.Client(timeout=60) as client:
        n = 0
        while not stop.is_set():
            text = f"burst {worker}-{n}"
            body = session_body(max_tokens=8)
            body["messages"][1]["content"] = text
            try:
                answer = client.post(f"{url}/api/permalinks", json=body)
            except httpx.TransportError:
                return  # killed: this one was never acknowledged
            if answer.status_code != 201:
                acknowledged.append(("unexpected", f"{answer.status_code} {answer.text}"))
                return
            acknowledged.append((answer.json()["id"], text))
            n += 1


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_kill_9_during_a_burst_of_permalinks_loses_none_acknowledged(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    if kind == "sqlite":
        env = {"MASKSCOPE_DB_URL": f"sqlite:///{tmp_path / 'permalinks.db'}"}
    else:
        env = {"MASKSCOPE_DB_URL": request.getfixturevalue("postgres").new_database()}
    # A burst from one client: past the default permalink quota of 60 a minute.
    env = {**env, **_ONE_COMPILER, "MASKSCOPE_PERMALINK_QUOTA_PER_MINUTE": "100000"}
    server = AppProcess(f"kill-{kind}", env=env)
    server.start()
    acknowledged: list[tuple[str, str]] = []
    stop = threading.Event()
    workers = [
        threading.Thread(target=_burst, args=(server.url, acknowledged, w, stop)) for w in range(6)
    ]
    try:
        for worker in workers:
            worker.start()
        deadline = time.monotonic() + 120
        while len(acknowledged) < 60 and time.monotonic() < deadline:
            time.sleep(0.01)
        server.kill()  # mid-burst: six writers are still sending
    finally:
        stop.set()
        for worker in workers:
            worker.join(timeout=60)
        server.stop()
    assert len(acknowledged) >= 60
    assert [a for a in acknowledged if a[0] == "unexpected"] == []
    restarted = AppProcess(f"kill-{kind}-restarted", env=env)
    restarted.start(wait=False)
    try:
        restarted.wait_ready()
        with httpx.Client(base_url=restarted.url, timeout=60) as client:
            missing: list[Any] = []
            for snapshot_id, text in list(acknowledged):
                found = client.get(f"/api/permalinks/{snapshot_id}")
                if found.status_code != 200:
                    missing.append((snapshot_id, found.status_code))
                else:
                    assert found.json()["request"]["messages"][1]["content"] == text
    finally:
        restarted.stop()
    assert missing == [], f"{len(missing)} of {len(acknowledged)} acknowledged permalinks lost"


def test_an_unreachable_database_stops_the_start_with_its_reason(tmp_path: Path) -> None:
    from tests.conftest import free_port

    url = f"postgresql://team:s3cret-password@127.0.0.1:{free_port()}/maskscope"
    env = {**os.environ, "MASKSCOPE_DB_URL": url}
    done = subprocess.run([sys.executable, "-m", "app", "serve", "--port", "9"], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2
    assert "error: the permalink database postgresql://team:***@127.0.0.1:" in done.stderr
    assert "s3cret" not in done.stderr + done.stdout
