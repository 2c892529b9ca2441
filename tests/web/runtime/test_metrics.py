"""``GET /metrics``: Prometheus' format, one registry per app, and figures that move with the
work done (a compile, a session's steps, a refusal, an eviction)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from app.engine import Engine
from app.main import create_app
from app.settings import Settings
from tests.web.conftest import session_body


@pytest.fixture(scope="module")
def app(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> FastAPI:
    """An app that keeps one session per client (the next one evicts it)."""
    settings = Settings(
        max_sessions_per_client=1, db_path=tmp_path_factory.mktemp("m") / "p.sqlite"
    )
    return create_app(settings, engine=engine)


@pytest.fixture(scope="module")
def client(app: FastAPI) -> Iterator[TestClient]:
    """An in-process client."""
    with TestClient(app) as test_client:
        yield test_client


def scrape(client: TestClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of ``/metrics``, by name and labels."""
    answer = client.get("/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain; version=")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    }


def _value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str,
           **labels: str) -> float:  # fmt: skip
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_a_compile_and_a_session_s_steps_move_the_figures(client: TestClient) -> None:
    before = scrape(client)
    # A source never compiled before: a cache miss, which runs on the compile pool.
    source = f'"{uuid.uuid4().hex}" [a-z]*'
    compiled = client.post("/api/compile", json={"kind": "ebnf", "source": f"root ::= {source}"})
    assert compiled.status_code == 200, compiled.text
    after = scrape(client)

    def moved(name: str, **labels: str) -> float:
        return _value(after, name, **labels) - _value(before, name, **labels)

    assert moved("maskscope_jobs_total", pool="compile", outcome="ok") == 1
    assert moved("maskscope_work_seconds_count", pool="compile") == 1
    assert moved("maskscope_work_seconds_sum", pool="compile") > 0

    before = after
    session = client.post("/api/sessions", json=session_body(max_tokens=20)).json()["id"]
    stepped = client.post(f"/api/sessions/{session}/step", json={"n": 3})
    assert stepped.status_code == 200, stepped.text
    after = scrape(client)
    assert moved("maskscope_jobs_total", pool="step", outcome="ok") >= 1
    assert moved("maskscope_work_seconds_count", pool="step") >= 1
    assert _value(after, "maskscope_sessions_open") >= 1
    assert _value(after, "maskscope_sessions_memory_bytes") > 0
    assert _value(after, "maskscope_model_ready") == 1
    assert _value(after, "maskscope_queue_threads", pool="compile") == 2
    assert _value(after, "maskscope_queue_waiting", pool="compile") == 0
    assert _value(after, "maskscope_shutting_down") == 0
    assert moved("maskscope_forward_prompts_total") == 1  # the session's prompt
    assert moved("maskscope_forward_batches_total") >= 2  # its steps after the prompt
    assert moved("maskscope_forward_batch_rows_total") >= moved("maskscope_forward_batches_total")


def test_a_failed_compile_counts_under_its_error_code(client: TestClient) -> None:
    before = scrape(client)
    bad = client.post("/api/compile", json={"kind": "ebnf", "source": "root ::= ("})
    assert bad.status_code == 422
    after = scrape(client)
    key = ("maskscope_jobs_total", (("outcome", "grammar_invalid"), ("pool", "compile")))
    assert after.get(key, 0) - before.get(key, 0) == 1


def test_an_eviction_is_counted(client: TestClient) -> None:
    before = _value(scrape(client), "maskscope_sessions_ended_total", cause="evicted_client")
    for _ in range(2):  # one session per client: the second evicts the first
        assert client.post("/api/sessions", json=session_body(max_tokens=2)).status_code == 200
    after = _value(scrape(client), "maskscope_sessions_ended_total", cause="evicted_client")
    assert after - before >= 1


def test_each_app_counts_apart(app: FastAPI, engine: Engine, client: TestClient) -> None:
    scrape(client)
    other = create_app(Settings(), engine=engine)
    with TestClient(other) as fresh:
        samples = scrape(fresh)
    assert _value(samples, "maskscope_jobs_total", pool="compile", outcome="ok") == 0


def test_an_unknown_host_is_refused_as_everywhere(client: TestClient) -> None:
    refused = client.get("/metrics", headers={"Host": "rebound.example"})
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "forbidden_origin"


def test_a_model_without_a_batcher_reports_no_forward_figures(toy_client: TestClient) -> None:
    # The toy model has no batcher (nor has any ServingModel to): its metrics answer, at zero.
    answer = toy_client.get("/metrics")
    assert answer.status_code == 200
    assert "maskscope_forward_batches_total 0.0" in answer.text
