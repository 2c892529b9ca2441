"""Pydantic sources through the API: derived schema, refusals as 4xx, validated outputs."""

from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.engine import Engine
from app.examples import EXAMPLES_DIR, load_examples
from app.main import create_app
from app.sandbox.contain import Level
from app.settings import Settings
from tests.sandbox.test_check import CORPUS
from tests.web.sse import parse_events

REPO = Path(__file__).resolve().parent.parent.parent


def test_compile_returns_the_derived_schema_and_models(client: TestClient) -> None:
    source = (EXAMPLES_DIR / "router.py").read_text()
    answer = client.post("/api/compile", json={"kind": "pydantic", "source": source}).json()
    assert answer["models"] == ["FetchUserFeatures", "Respond", "Router"]
    assert answer["json_schema"] == json.loads((EXAMPLES_DIR / "router.json").read_text())
    assert "root ::=" in answer["grammar"]
    picked = client.post(
        "/api/compile",
        json={"kind": "pydantic", "source": source, "options": {"root_model": "Respond"}},
    ).json()
    assert picked["json_schema"]["title"] == "Respond"


def test_the_adversarial_corpus_is_refused_and_the_server_keeps_answering(
    client: TestClient,
) -> None:
    before = {p.name for p in REPO.iterdir()}
    for source, said in CORPUS:
        response = client.post("/api/compile", json={"kind": "pydantic", "source": source})
        assert response.status_code in (413, 422), source
        if response.status_code == 422:
            assert said in response.json()["error"]["message"]
        assert client.get("/healthz").status_code == 200
    assert {p.name for p in REPO.iterdir()} == before


def test_other_requests_are_answered_while_the_sandbox_runs(client: TestClient) -> None:
    source = (EXAMPLES_DIR / "risk.py").read_text() + f"\n# {uuid.uuid4()}\n"  # not cached
    done = threading.Event()

    def compile_it() -> None:
        response = client.post("/api/compile", json={"kind": "pydantic", "source": source})
        assert response.status_code == 200
        done.set()

    worker = threading.Thread(target=compile_it)
    worker.start()
    answered = [client.get("/healthz").status_code for _ in range(3)]
    finished_first = done.is_set()
    worker.join(timeout=60)
    assert answered == [200, 200, 200] and done.is_set()
    assert not finished_first, "health checks should be answered while the sandbox works"


@pytest.mark.parametrize("example", load_examples(), ids=lambda e: e.id)
def test_each_pydantic_example_generates_output_the_model_validates(
    client: TestClient, example: object
) -> None:
    from app.examples import Example

    assert isinstance(example, Example)
    body = {
        "grammar": {"kind": "pydantic", "source": example.source(".py")},
        "messages": [
            {"role": "system", "content": example.system},
            {"role": "user", "content": example.prompt},
        ],
        "schema_in_prompt": example.schema_in_prompt,
        "max_tokens": example.max_tokens,
    }
    session_id = client.post("/api/sessions", json=body).json()["id"]
    events = parse_events(client.get(f"/api/sessions/{session_id}/events?format=json").text)
    final = json.loads(next(e["data"] for e in events if e["event"] == "done"))
    assert final["stop_reason"] == "terminated", final["text"]
    assert final["validation"] == {"valid": True, "errors": []}


TYPEVAR_TRAPS = {
    "bound": "T = TypeVar('T', bound=\"__import__('os').system('touch {mark}')\")",
    "constraints": "T = TypeVar('T', int, \"__import__('os').system('touch {mark}')\")",
    "default": "T = TypeVar('T', default=\"__import__('os').system('touch {mark}')\")",
}


@pytest.mark.parametrize("where", TYPEVAR_TRAPS)
def test_a_string_in_a_typevar_is_held_to_the_annotation_rules(
    client: TestClient, tmp_path: Path, where: str
) -> None:
    mark = tmp_path / "ran"
    source = (
        "from typing import Generic\nfrom typing_extensions import TypeVar\n"
        "from pydantic import BaseModel\n"
        + TYPEVAR_TRAPS[where].format(mark=mark)
        + "\nclass Box(BaseModel, Generic[T]):\n    value: T\n"
        "class Holder(BaseModel):\n    box: Box\n"
    )
    response = client.post("/api/compile", json={"kind": "pydantic", "source": source})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "source_refused"
    assert error["line"] == 4 and error["column"] > 1
    assert "calling system is not allowed" in error["message"]
    assert not mark.exists()


def test_below_the_allowed_containment_pydantic_is_refused_with_the_reason(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    import app.sandbox.sandbox as sandbox_module

    # A kernel without Landlock, as the probe would find it (the one call patched).
    monkeypatch.setattr(
        sandbox_module, "probe", lambda limits: (Level.SECCOMP, "landlock: not supported")
    )
    source = (EXAMPLES_DIR / "candidate.py").read_text()
    body = {"kind": "pydantic", "source": source}
    with TestClient(create_app(Settings(), engine=engine)) as strict:
        assert strict.get("/readyz").json()["sandbox"] == "seccomp"
        response = strict.post("/api/compile", json=body)
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["code"] == "sandbox_unconfined"
        assert "MASKSCOPE_SANDBOX_ALLOW_WEAK_CONTAINMENT=seccomp" in error["message"]
        assert "landlock: not supported" in error["message"]
        schema = {"kind": "json_schema", "source": '{"type": "integer"}'}
        assert strict.post("/api/compile", json=schema).status_code == 200
    weak = Settings(sandbox_allow_weak_containment="seccomp")
    with TestClient(create_app(weak, engine=engine)) as lenient:
        assert lenient.post("/api/compile", json=body).status_code == 200


def test_a_model_with_a_validator_compiles_with_its_methods_named(client: TestClient) -> None:
    from tests.sandbox.test_check import VALIDATED

    answer = client.post("/api/compile", json={"kind": "pydantic", "source": VALIDATED}).json()
    assert answer["stripped"] == [
        "Answer.check_reason (@field_validator, @classmethod)",
        "Answer.describe (a method)",
        "Empty.only (a method)",
    ]
    assert answer["models"] == ["Answer", "Empty"]
    plain = client.post(
        "/api/compile",
        json={"kind": "pydantic", "source": VALIDATED, "options": {"root_model": "Answer"}},
    ).json()
    assert plain["json_schema"]["properties"]["reason"]["maxLength"] == 80
