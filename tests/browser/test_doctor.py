"""The Doctor tab in a real browser: an ignored keyword marked in the editor, a finding whose
witness opens in the Replay tab, and the serving stacks side by side."""

from __future__ import annotations

import json

from playwright.sync_api import Page, expect

from tests.browser.conftest import ARTIFACTS

SCHEMA = '{\n  "type": "array",\n  "items": {"type": "integer"},\n  "uniqueItems": true\n}'


def test_a_uniqueitems_schema_in_the_doctor_tab(page: Page, live_server: str) -> None:
    page.goto(live_server)
    page.locator("#editor .cm-content").click()
    page.keyboard.press("Control+A")
    page.keyboard.insert_text(SCHEMA)
    expect(page.locator("#compile-result .stats")).to_contain_text("compiled")
    page.click('.compile-panel .tab-button[data-view="doctor"]')
    expect(page.locator("#doctor-result .doctor-backends")).to_be_visible(timeout=60_000)
    expect(page.locator("#doctor-flag")).not_to_have_text("")

    # uniqueItems is marked like a lint warning, on its line
    expect(page.locator("#editor .cm-lint-marker-warning")).to_have_count(1)
    expect(page.locator("#editor .cm-lintRange-warning")).to_have_text('"uniqueItems": true')
    ignored = page.locator('#doctor-result tr.status-ignored[data-pointer="/uniqueItems"]')
    expect(ignored).to_have_count(1)

    # a witness: a document the grammar accepts, with duplicates
    witness = page.locator("#doctor-result .witness.grammar_accepts_schema_rejects").first
    expect(witness).to_contain_text("has non-unique elements")
    items = json.loads(witness.locator(".witness-text").inner_text())
    assert len(items) > len(set(items))

    # each finding shows its witness, the offending part marked; clicking it replays it
    example = page.locator("#doctor-result .doctor-findings .finding-example").first
    expect(example.locator("mark")).not_to_be_empty()
    text = example.get_attribute("data-replay-text")
    assert text is not None and len(json.loads(text)) > len(set(json.loads(text)))
    example.click()
    expect(page.locator('input[name="mode"][value="replay"]')).to_be_checked()
    expect(page.locator("#replay-text")).to_have_value(text)
    expect(page.locator("#replay-result")).to_contain_text("accepted and complete")

    vllm = page.locator('#doctor-result .backend[data-backend="vllm"]')
    expect(vllm).to_contain_text("falls back to guidance")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "doctor.png"))
    page.locator(".compile-panel").screenshot(path=str(ARTIFACTS / "doctor-panel.png"))

    # back on the Compile tab, the grammar is still there; the marks stay in the editor
    page.click('.compile-panel .tab-button[data-view="compile"]')
    expect(page.locator("#compile-result .grammar-text")).to_be_visible()
    expect(page.locator("#editor .cm-lint-marker-warning")).to_have_count(1)
