"""The page and its HTMX fragments, rendered in-process; exact asserts on the HTML."""

from __future__ import annotations

import re
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.engine.masking import XGrammarMasking
from tests.web.conftest import NESTED_SOURCE

HX = {"HX-Request": "true"}


def _form(**overrides: str) -> dict[str, str]:
    form = {
        "kind": "json_schema", "source": NESTED_SOURCE, "preset": "maskscope", "strict_mode": "on",
        "prompt_mode": "chat", "system": "Reply with JSON only.", "schema_in_prompt": "on",
        "user": "Create user 42, Ada Lovelace, dark theme.", "temperature": "0", "top_p": "1",
        "seed": "", "max_tokens": "60",
    }  # fmt: skip
    form.update(overrides)
    return form


def _session(client: TestClient, **overrides: str) -> str:
    html = client.post("/ui/sessions", data=_form(**overrides), headers=HX).text
    match = re.search(r'data-session-id="([^"]+)"', html)
    assert match, html
    return match.group(1)


PLAYGROUND_SCRIPTS = [
    "core", "routes", "editor", "config", "tools", "inspector", "timeline", "classes", "session",
    "breaks", "instruments", "replay", "replay_texts", "keys", "layout",
]  # fmt: skip


def test_the_page_loads_everything_locally(client: TestClient) -> None:
    html = client.get("/").text
    assert "<title>Playground · Maskscope</title>" in html
    scripts = re.findall(r'<script src="([^"]+)"', html)
    playground = [f"/static/playground/{name}.js" for name in PLAYGROUND_SCRIPTS]
    assert scripts == ["/static/vendor/htmx.min.js", "/static/vendor/htmx-ext-sse.min.js",
                       "/static/vendor/codemirror.min.js", *playground, "/static/app.js",
                       "/static/engines.js", "/static/tests.js", "/static/export.js"]  # fmt: skip
    for url in re.findall(r'(?:src|href)="([^"]+)"', html):
        assert url.startswith(("/", "data:", "#")), url  # nothing from a CDN
    for path in scripts + ["/static/app.css", "/static/engines.css"]:
        assert client.get(path).status_code == 200
    assert '<option value="pricing"' in html
    assert "weights <code>" in html


def test_an_example_opens_prefilled(client: TestClient) -> None:
    html = client.get("/?example=nested").text
    assert '<option value="nested" selected' in html
    assert "&#34;user&#34;" in html or "&quot;user&quot;" in html  # the schema, escaped
    assert "Ada Lovelace" in html


def test_compile_fragment_shows_warnings_and_errors(client: TestClient) -> None:
    source = '{"type": "object", "properties": {"x": {"type": "number", "multipleOf": 2}}}'
    html = client.post("/ui/compile", data=_form(source=source), headers=HX).text
    assert '<span class="badge ok">compiled</span>' in html
    assert "multipleOf is not supported for type:number; ignoring multipleOf" in html
    broken = client.post("/ui/compile", data=_form(source='{"type":\n "x"'), headers=HX).text
    assert 'data-error-line="2"' in broken and "does not compile" in broken


def test_step_back_and_inspect_fragments(client: TestClient) -> None:
    sid = _session(client)
    first = client.post(f"/ui/sessions/{sid}/step", headers=HX).text
    assert first.lstrip().startswith('<span class="chip')
    assert 'id="tok-0"' in first and 'hx-swap-oob="true"' in first
    assert 'id="inspector"' in first and 'id="status"' in first
    client.post(f"/ui/sessions/{sid}/step", headers=HX)
    back = client.post(f"/ui/sessions/{sid}/back", headers=HX).text
    assert back.startswith('<span id="tok-1" hx-swap-oob="delete"></span>')
    inspector = client.get(f"/ui/sessions/{sid}/steps/0", headers=HX).text
    assert 'data-index="0"' in inspector and '<table class="topk"' in inspector
    assert re.search(r'data-bitmask="[A-Za-z0-9+/=]{8000,}"', inspector)
    missing = client.get(f"/ui/sessions/{sid}/steps/9", headers=HX)
    assert missing.status_code == 422 and missing.headers["HX-Retarget"] == "#toast"


def test_forcing_a_blocked_token_shows_the_reason(client: TestClient) -> None:
    sid = _session(client)
    client.post(f"/ui/sessions/{sid}/step", headers=HX)
    hello = client.app.state.maskscope.engine.model.tokens.encode("hello")[0]  # type: ignore[attr-defined]
    refused = client.post(
        f"/ui/sessions/{sid}/force", data={"token_id": hello, "at": 0}, headers=HX
    )
    assert refused.status_code == 409
    assert refused.headers["HX-Retarget"] == "#toast"
    assert "the grammar blocks token" in refused.text


def test_the_run_element_connects_the_stream(client: TestClient) -> None:
    sid = _session(client)
    html = client.post(f"/ui/sessions/{sid}/run", headers=HX).text
    assert f'sse-connect="/api/sessions/{sid}/events?after=-1"' in html
    assert 'sse-swap="step"' in html and 'sse-close="end"' in html


def test_replay_fragment(client: TestClient) -> None:
    text = '{"user": {"id": 0}}'
    html = client.post("/ui/replay", data={**_form(), "text": text}, headers=HX).text
    assert "Refused at offset <b>16</b>" in html
    inspector = client.post("/ui/replay/0", data={**_form(), "text": text}, headers=HX).text
    assert "Replayed token <b>#0</b>" in inspector and "accepted" in inspector
    refused = client.post("/ui/replay/7", data={**_form(), "text": text}, headers=HX).text
    assert "Replayed token <b>#7</b>" in refused and ">refused</span>" in refused
    assert re.search(r'data-bitmask="[A-Za-z0-9+/=]{8000,}"', refused), "fetched on demand"
    past = client.post("/ui/replay/8", data={**_form(), "text": text}, headers=HX)
    assert past.status_code == 422 and "token 8 does not exist (the replay has 8)" in past.text


def test_untrusted_text_is_escaped(client: TestClient) -> None:
    payload = "</textarea><script>alert(1)</script>"
    form: dict[str, Any] = {**_form(kind="regex", source="[<>/a-z()0-9]+"), "text": payload}
    html = client.post("/ui/replay", data=form, headers=HX).text
    assert "<script" not in html and "</textarea>" not in html
    assert re.search(r'class="chip ok"[^>]*>&lt;[^<]*</span>', html)  # the "<" token, escaped
    broken = client.post("/ui/compile", data=_form(kind="regex", source=payload + "("), headers=HX)
    assert "<script" not in broken.text and "does not compile" in broken.text


def test_not_found_page(client: TestClient) -> None:
    response = client.get("/nothing-here")
    assert response.status_code == 404


def test_the_inspector_flags_a_mask_accept_disagreement(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    brace = 107  # "{": the nested schema's first token, allowed by the mask at step 0
    real = XGrammarMasking.probe_token

    def lying(self: XGrammarMasking, token_id: int) -> bool:
        return (not real(self, token_id)) if token_id == brace else real(self, token_id)

    monkeypatch.setattr(XGrammarMasking, "probe_token", lying)
    sid = _session(client)
    first = client.post(f"/ui/sessions/{sid}/step", headers=HX).text
    assert re.search(r'<span class="chip k-forced disagree( alarm)?"\s+id="tok-0"', first)
    assert 'data-agree="false"' in first
    assert '<div class="disagree-flag" role="alert">' in first
    assert "disagreed on 1 of the" in first
    assert (
        f'<code class="probe-token" data-token-id="{brace}">id {brace}</code>: the mask allows it, '
        "<code>accept_token</code> refuses it: an engine bug</li>"
    ) in first
    assert "1 DISAGREE" in first and ">depth before</dt><dd>0</dd>" in first
    second = client.post(f"/ui/sessions/{sid}/step", headers=HX).text
    assert 'data-agree="true"' in second and "disagree-flag" not in second
    assert "all agree" in second


def test_the_inspector_flags_xgrammar_over_masking_as_not_expected(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(XGrammarMasking, "probe_token", lambda self, token_id: True)
    sid = _session(client)
    first = client.post(f"/ui/sessions/{sid}/step", headers=HX).text
    wordings = re.findall(r'<li><code class="probe-token"[^>]*>id \d+</code>: (.*?)</li>', first)
    over = (
        "the mask blocks it, <code>accept_token</code> takes it: over-masking, where "
        "xgrammar's mask is meant to be exact"
    )
    assert wordings and set(wordings) == {over}


def test_the_inspector_says_llguidances_canonical_spelling_mask_is_expected(
    client: TestClient,
) -> None:
    # At step 0 of the nested schema '{"' is forced: llguidance's mask leaves out "{" (107),
    # which its consume_token still takes. Real llguidance, nothing patched.
    sid = _session(client, engine="llguidance")
    first = client.post(f"/ui/sessions/{sid}/step", headers=HX).text
    assert '<div class="disagree-flag" role="alert">' in first
    items = re.findall(r'<li><code class="probe-token"[^>]*>id (\d+)</code>: (.*?)</li>', first)
    assert ("107", "the mask blocks it, <code>accept_token</code> takes it: llguidance's "
            "canonical-spelling mask, expected") in items  # fmt: skip
    assert all("engine bug" not in wording for _, wording in items)
