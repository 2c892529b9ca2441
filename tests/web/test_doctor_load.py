"""``POST /api/doctor`` past the Doctor's safety stop (``MASKSCOPE_DOCTOR_TIME_LIMIT_S``): its
work is a fixed count, so only load takes it there, and the answer says so (a 503
``cut_short_by_load``), never ``grammar_too_complex``; the workers go on serving."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from app.engine import Engine
from app.main import create_app
from app.settings import Settings
from tests.conftest import as_page

SCHEMA = {"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True,
          "items": {"type": "string", "maxLength": 4}}}, "required": ["tags"]}  # fmt: skip
BODY = {"grammar": {"kind": "json_schema", "source": json.dumps(SCHEMA)}}


@pytest.fixture(scope="module")
def client(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """An app whose Doctor may spend a microsecond of its own on an examination."""
    settings = Settings(db_path=tmp_path_factory.mktemp("doctor-stop") / "p.db",
                        doctor_time_limit_s=1e-6)  # fmt: skip
    with TestClient(create_app(settings, engine=engine)) as test_client:
        yield as_page(test_client)


def test_past_the_safety_stop_the_answer_is_cut_short_by_load(client: TestClient) -> None:
    for _ in range(2):  # the killed worker's replacement answers the same
        response = client.post("/api/doctor", json=BODY)
        assert response.status_code == 503, response.text
        error = response.json()["error"]
        assert error["code"] == "cut_short_by_load", error
        assert "MASKSCOPE_DOCTOR_TIME_LIMIT_S" in error["message"]
        assert "too complex" not in error["message"]
