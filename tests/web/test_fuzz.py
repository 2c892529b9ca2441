"""Schemathesis against the OpenAPI schema: whatever it sends, no answer is a 5xx."""

from __future__ import annotations

from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from app.engine import Engine
from app.main import create_app
from app.settings import Settings


def test_no_input_gets_a_server_error(engine: Engine, tmp_path: Path) -> None:
    app = create_app(
        Settings(db_path=tmp_path / "p.db", max_sessions=4, max_tokens_cap=8), engine=engine
    )
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]  # type: ignore[union-attr]
    assert len(operations) >= 15
    seen: set[str] = set()
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
        def fuzz(case: schemathesis.Case) -> None:  # type: ignore[type-arg]
            # Schemathesis' 10 s read limit is no 5xx: a first Doctor's or compile's cold worker
            # may take longer on a busy machine. An event stream is read until its limit.
            response = case.call(timeout=10 if case.path.endswith("/events") else 180)
            seen.add(f"{case.method} {case.path}")
            if case.path == "/readyz":
                return
            assert response.status_code < 500, (case.method, case.path, response.text[:300])
            if response.status_code >= 400:
                assert set(response.json()) == {"error"}, response.text[:300]

        fuzz()
    assert len(seen) == len(operations)


@pytest.mark.parametrize("payload", [b"\xff\xfe{", b'{"kind": "regex", "source": "\\udc80"}'])
def test_bytes_that_are_not_utf8_json_are_4xx(engine: Engine, payload: bytes) -> None:
    from fastapi.testclient import TestClient

    with TestClient(create_app(Settings(), engine=engine)) as client:
        response = client.post(
            "/api/compile", content=payload, headers={"content-type": "application/json"}
        )
    assert 400 <= response.status_code < 500 and set(response.json()) == {"error"}
