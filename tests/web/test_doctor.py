"""``POST /api/doctor`` and the Doctor tab's fragment, in-process."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.doctor import MAX_BUDGET_MS, Doctor
from app.engine import Engine, GrammarKind, GrammarSpec
from app.examples import EXAMPLES_DIR
from app.main import create_app
from app.settings import Settings
from tests.conftest import as_page

UNIQUE = json.dumps({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, indent=2)
BACKENDS = ["xgrammar", "vllm", "sglang", "llguidance", "openai_strict"]


def test_the_answer_has_every_part_of_the_contract(client: TestClient) -> None:
    body = {"grammar": {"kind": "json_schema", "source": UNIQUE}, "seed": 1}
    response = client.post("/api/doctor", json=body)
    assert response.status_code == 200, response.text
    body = response.json()
    parts = {"findings", "keywords", "witnesses", "search", "enforcement", "backends", "costs"}
    assert set(body) == parts
    unique = next(k for k in body["keywords"] if k["pointer"] == "/uniqueItems")
    assert unique == {"pointer": "/uniqueItems", "keyword": "uniqueItems", "line": 6,
                      "status": "ignored", "detail": unique["detail"], "witness": unique["witness"],
                      "span": unique["span"], "note": None}  # fmt: skip
    assert unique["witness"] is not None and len(unique["span"]) == 2
    finding = next(f for f in body["findings"] if "/uniqueItems" in f["pointers"])
    assert set(finding) == {"cause", "direction", "keywords", "pointers", "count", "example",
                            "span", "note"}  # fmt: skip
    assert finding["keywords"] == ["uniqueItems"] and finding["count"] >= 1
    witness = body["witnesses"][0]
    assert witness["direction"] == "grammar_accepts_schema_rejects" and witness["refusal"] is None
    assert witness["errors"][0]["path"] == "$" and witness["pointers"] == ["/uniqueItems"]
    assert body["search"]["seed"] == 1 and body["search"]["documents"] > 0
    assert [b["backend"] for b in body["backends"]] == BACKENDS
    assert {b["verdict"] for b in body["backends"]} <= {"ok", "ignores", "falls_back", "refuses"}
    assert set(body["costs"]) == {
        "compile_ms", "compile_ms_any_whitespace", "size_bytes", "shortest_document_tokens",
        "shortest_document", "unbounded_whitespace", "max_tokens_below_shortest",
    }  # fmt: skip


def test_a_pydantic_source_is_examined_with_its_lines(client: TestClient) -> None:
    source = (EXAMPLES_DIR / "router.py").read_text()
    response = client.post("/api/doctor", json={"grammar": {"kind": "pydantic", "source": source}})
    assert response.status_code == 200, response.text
    lines = source.splitlines()
    pattern = next(k for k in response.json()["keywords"] if k["keyword"] == "pattern")
    assert lines[pattern["line"] - 1].strip().startswith("user_id:")


def test_grammars_get_the_llguidance_row_and_costs(client: TestClient) -> None:
    body = {"grammar": {"kind": "regex", "source": "[a-z]+ +x"}, "max_tokens": 1}
    answer = client.post("/api/doctor", json=body).json()
    assert [b["backend"] for b in answer["backends"]] == ["llguidance"]
    assert answer["costs"]["unbounded_whitespace"] is True
    assert answer["costs"]["max_tokens_below_shortest"] is True


def test_bad_input_is_a_422_that_says_where(client: TestClient) -> None:
    bad = {"grammar": {"kind": "json_schema", "source": '{"type": "strnig"}'}}
    error = client.post("/api/doctor", json=bad).json()["error"]
    assert error["code"] == "grammar_invalid" and error["pointer"] == "/type"
    over = {"grammar": {"kind": "json_schema", "source": "{}"}, "budget_ms": MAX_BUDGET_MS + 1}
    response = client.post("/api/doctor", json=over)
    assert response.status_code == 422 and response.json()["error"]["pointer"] == "/budget_ms"


def test_the_budget_cap_is_declared_in_openapi(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()["components"]["schemas"]["DoctorIn"]
    assert schema["properties"]["budget_ms"]["maximum"] == MAX_BUDGET_MS


def test_the_fragment_marks_keywords_for_the_editor(client: TestClient) -> None:
    form = {"kind": "json_schema", "source": UNIQUE, "preset": "vllm", "max_tokens": "1"}
    response = client.post("/ui/doctor", data=form, headers={"HX-Request": "true"})
    assert response.status_code == 200
    html = response.text
    assert 'data-marks=\'[{"line": 6, ' in html and 'data-backend="vllm"' in html
    assert "falls back to guidance" in html and "max tokens 1 is below it" in html
    broken = client.post("/ui/doctor", data={**form, "source": "{"})
    assert broken.status_code == 200 and 'data-error="true"' in broken.text


def test_a_boolean_schema_is_examined(client: TestClient) -> None:
    # llguidance raises on a boolean schema with options: a refusal in its row, not a 500
    response = client.post(
        "/api/doctor", json={"grammar": {"kind": "json_schema", "source": "true"}}
    )
    assert response.status_code == 200, response.text
    rows = {b["backend"]: b for b in response.json()["backends"]}
    assert rows["llguidance"]["verdict"] == "refuses" and rows["xgrammar"]["verdict"] == "ok"


@pytest.mark.parametrize("schema", [
    {"type": "integer", "multipleOf": 0.123456789},
    {"$ref": "#bigint", "$defs": {"bigint": {"$anchor": "bigint", "maximum": 10}}},
], ids=["huge multipleOf", "$anchor"])  # fmt: skip
def test_schemas_that_broke_the_doctor_get_an_answer(client: TestClient, schema: Any) -> None:
    body = {"grammar": {"kind": "json_schema", "source": json.dumps(schema)}}
    response = client.post("/api/doctor", json=body)
    assert response.status_code == 200, response.text
    assert any(f["direction"] == "grammar_accepts_schema_rejects"
               for f in response.json()["findings"])  # fmt: skip


def test_the_tab_shows_findings_with_their_witness_marked(client: TestClient) -> None:
    schema = {
        "type": "object",
        "required": ["name", "n"],
        "properties": {
            "name": {"type": "string", "maxLength": 5},
            "n": {"type": "integer", "not": {"const": 0}},
        },
    }
    form = {"kind": "json_schema", "source": json.dumps(schema, indent=2)}
    html = as_page(client).post("/ui/doctor", data=form).text
    # the badge counts findings (causes), not documents
    shown = html.count('class="finding-head"')
    assert shown > 0 and f'data-flagged="{shown}"' in html
    assert html.index('data-direction="not_json"') < html.index('class="doctor-keywords"')
    assert "<mark>\\u001a</mark>" in html or "<mark>\\u000a</mark>" in html
    # the row says the keyword the user wrote, and its witness opens in the replay
    row = html[html.index('data-pointer="/properties/n/not"') :]
    assert '<b class="kw-name">not</b>' in row[:600] and "data-replay-text=" in row[:2000]
    assert "/not/const" not in html


def test_no_witness_from_a_search_cut_short_is_not_told_as_none_to_find(
    engine: Engine, settings: Settings
) -> None:
    # Forty strings a document: the Doctor's least budget is spent within the first few.
    fields = {f"field_{i}": {"type": "string"} for i in range(40)}
    schema = {"type": "object", "properties": fields, "required": list(fields)}
    spec = GrammarSpec(GrammarKind.JSON_SCHEMA, json.dumps(schema, indent=2))
    report = Doctor.of(engine).examine(spec, seed=0, budget_ms=100)
    assert report.search is not None and report.search.cut_short and not report.witnesses
    html = create_app(settings).state.maskscope.render(
        "partials/_doctor.html", {"report": report, "marks": [], "flagged": 0, "max_tokens": None}
    )
    judged = report.search.grammar_documents + report.search.schema_documents
    said = f"No witness among the {judged} documents judged, but the examination was cut short"
    assert said in html
    assert "every document the grammar wrote passed" not in html
