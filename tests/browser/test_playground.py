"""The playground in a real browser: pick, compile, run, inspect, back, force, replay."""

from __future__ import annotations

import pytest
from playwright.sync_api import Dialog, Page, expect

from app.engine.masking import XGrammarMasking
from tests.browser.answered import answered, wait_answered
from tests.browser.conftest import ARTIFACTS
from tests.web.test_pages import PLAYGROUND_SCRIPTS


def _lit_cells(page: Page) -> int:
    """Cells drawn as allowed: teal, or yellow (an allowed top-k token), or the chosen token."""
    count: int = page.evaluate(
        """() => {
            const canvas = document.querySelector('#mask-canvas');
            const ctx = canvas.getContext('2d');
            const data = ctx.getImageData(0, 0, canvas.width, canvas.height).data;
            const lit = new Set(['20,184,166', '234,179,8', '30,27,75']);
            let n = 0;
            for (let i = 0; i < data.length; i += 4) {
                if (lit.has(`${data[i]},${data[i + 1]},${data[i + 2]}`)) n++;
            }
            return n;
        }"""
    )
    return count


def test_the_playground_end_to_end(page: Page, live_server: str) -> None:
    page.goto(live_server)
    page.select_option("#example", "pricing")
    expect(page.locator("#compile-result .stats")).to_contain_text("compiled")
    expect(page.locator("#compile-result .grammar-text")).to_contain_text("root ::=")

    page.fill('input[name="max_tokens"]', "10")
    page.click("#btn-run")
    expect(page.locator("#status")).to_have_attribute("data-done", "true", timeout=60_000)
    expect(page.locator("#tokens .chip")).to_have_count(10)
    expect(page.locator("#status")).to_contain_text("stopped: max_tokens")
    expect(page.locator("#prompt-rendered")).to_contain_text("tokens")

    page.click("#tok-0")
    expect(page.locator("#inspector")).to_have_attribute("data-index", "0")
    expect(page.locator("#inspector .topk tbody tr")).to_have_count(10)
    assert page.locator("#inspector .topk tr.blocked").count() >= 1
    page.wait_for_function("() => document.querySelector('#mask-canvas').width === 256")
    allowed = int(page.locator("#inspector .mask-legend b").first.inner_text().replace(",", ""))
    assert _lit_cells(page) == allowed  # the picture is the mask: one lit cell per allowed token
    page.fill("#token-search", "{")
    expect(page.locator("#search-results li").first).to_contain_text("allowed")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "playground.png"))

    page.click("#btn-back")
    expect(page.locator("#tokens .chip")).to_have_count(9)
    expect(page.locator("#status")).to_contain_text("9 / 10 steps")

    page.click("#tok-8")
    expect(page.locator("#inspector")).to_have_attribute("data-index", "8")
    page.locator("#inspector .topk tr.allowed button.force").last.click()
    expect(page.locator("#tok-8.forced")).to_have_count(1)
    expect(page.locator("#tokens .chip")).to_have_count(9)

    page.click("#tok-0")
    expect(page.locator("#inspector")).to_have_attribute("data-index", "0")
    page.locator("#inspector .topk tr.blocked button.force").first.click()
    expect(page.locator("#toast")).to_contain_text("the grammar blocks token")
    expect(page.locator("#tokens .chip")).to_have_count(9)

    page.click("label.tab:has(input[value=replay])")
    page.fill("#replay-text", '{"churn_analysis": 42}')
    page.click("#btn-replay")
    expect(page.locator("#replay-result")).to_contain_text("Refused at offset 19")
    expect(page.locator("#replay-result mark")).to_have_text("4")
    page.screenshot(path=str(ARTIFACTS / "replay.png"))


def test_keyboard_steps_and_goes_back(page: Page, live_server: str) -> None:
    page.goto(f"{live_server}/?example=nested")
    expect(page.locator("#compile-result .stats")).to_contain_text("compiled")
    page.locator("header.topbar").click()
    for _ in range(3):
        page.keyboard.press("ArrowRight")
        page.wait_for_timeout(50)
    expect(page.locator("#tokens .chip")).to_have_count(3)
    page.keyboard.press("Backspace")
    expect(page.locator("#tokens .chip")).to_have_count(2)
    page.keyboard.press(" ")
    expect(page.locator("#status")).to_have_attribute("data-done", "true", timeout=60_000)
    expect(page.locator("#status")).to_contain_text("stopped: terminated")
    expect(page.locator("#status .badge.ok")).to_have_text("valid")


def test_a_pydantic_source_shows_its_derived_schema(page: Page, live_server: str) -> None:
    page.goto(live_server)
    page.click("text=Pydantic")
    page.select_option("#example", "risk")
    expect(page.locator("#compile-result .derived")).to_contain_text("RiskAssessment")
    expect(page.locator("#compile-result .derived-text")).to_contain_text('"minItems": 2')
    page.locator("#editor .cm-content").click()
    page.keyboard.press("Control+End")
    page.keyboard.type("\nimport os\n")
    expect(page.locator("#compile-result .compile-error")).to_contain_text(
        "importing 'os' is not allowed"
    )
    expect(page.locator("#editor .cm-lint-marker-error")).to_have_count(1)
    page.screenshot(path=str(ARTIFACTS / "pydantic.png"))


PAYLOAD = "</textarea><script>alert(1)</script>"


def test_a_hostile_permalink_renders_inert(page: Page, live_server: str) -> None:
    import httpx

    body = {
        "grammar": {"kind": "regex", "source": PAYLOAD, "options": {"root_model": PAYLOAD}},
        "messages": [{"role": "system", "content": PAYLOAD}, {"role": "user", "content": PAYLOAD}],
        "max_tokens": 40,
        "actions": [{"op": "step", "n": 40}],
    }
    snapshot_id = httpx.post(f"{live_server}/api/permalinks", json=body, timeout=60).json()["id"]
    dialogs: list[str] = []

    def on_dialog(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    page.goto(f"{live_server}/s/{snapshot_id}")
    expect(page.locator("#permalink-banner")).to_contain_text(snapshot_id)
    expect(page.locator("#status")).to_have_attribute("data-done", "true", timeout=60_000)
    chips = "".join(page.locator("#tokens .chip").all_inner_texts())
    assert chips.replace("·", " ").startswith("</textarea><script>alert1</script>")
    assert page.locator('textarea[name="system"]').input_value() == PAYLOAD
    assert page.locator('textarea[name="user"]').input_value() == PAYLOAD
    assert page.locator("#source").input_value() == PAYLOAD
    scripts = page.evaluate("() => [...document.scripts].map((s) => s.src || s.id)")
    assert [s.rsplit("/", 1)[-1] for s in scripts] == [  # the page's own, none from the snapshot
        "htmx.min.js", "htmx-ext-sse.min.js", "codemirror.min.js",
        *[f"{name}.js" for name in PLAYGROUND_SCRIPTS], "app.js",
        "llguidance-presets", "engines.js", "shared-tests", "tests.js", "presets", "export.js",
    ]  # fmt: skip
    since = answered(page)
    page.click("#tok-3")
    expect(page.locator("#inspector")).to_have_attribute("data-index", "3")
    wait_answered(page, r"/steps/3$", since=since)  # its inspector swapped and settled: no alert
    assert dialogs == []
    page.screenshot(path=str(ARTIFACTS / "hostile-permalink.png"))


def test_share_copies_a_link_that_reopens_the_run(page: Page, live_server: str) -> None:
    page.goto(f"{live_server}/?example=nested")
    expect(page.locator("#compile-result .stats")).to_contain_text("compiled")
    page.fill('input[name="max_tokens"]', "6")
    page.click("#btn-run")
    expect(page.locator("#status")).to_have_attribute("data-done", "true", timeout=60_000)
    page.click("#btn-share")
    link = page.locator("#share-result .share-link")
    expect(link).to_have_count(1)
    url = link.get_attribute("data-url")
    assert url and "/s/" in url
    before = page.locator("#tokens").inner_text()
    page.goto(url)
    expect(page.locator("#tokens .chip")).to_have_count(6, timeout=60_000)
    assert page.locator("#tokens").inner_text() == before


# Timeline columns holding the mask/accept disagreement mark (amber, full height).
_AMBER_COLUMNS = """() => {
    const canvas = document.querySelector('#timeline');
    const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, 1).data;
    let n = 0;
    for (let i = 0; i < data.length; i += 4) {
        if (data[i] > 120 && data[i + 1] > 50 && data[i + 1] < 110 && data[i + 2] < 60) n++;
    }
    return n;
}"""


def _amber_columns(page: Page) -> int:
    """Timeline columns holding the mask/accept disagreement mark (amber, full height)."""
    count: int = page.evaluate(_AMBER_COLUMNS)
    return count


def test_a_mask_accept_disagreement_is_flagged(
    page: Page, live_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    brace = 107  # "{", the nested schema's first token
    real = XGrammarMasking.probe_token

    def lying(self: XGrammarMasking, token_id: int) -> bool:
        return (not real(self, token_id)) if token_id == brace else real(self, token_id)

    monkeypatch.setattr(XGrammarMasking, "probe_token", lying)
    page.goto(f"{live_server}/?example=nested")
    expect(page.locator("#compile-result .stats")).to_contain_text("compiled")
    page.click("#btn-step")
    expect(page.locator("#tok-0.disagree")).to_have_count(1)
    page.click("#btn-step")
    expect(page.locator("#tokens .chip")).to_have_count(2)
    page.click("#tok-0")
    expect(page.locator("#inspector")).to_have_attribute("data-index", "0")
    expect(page.locator("#inspector .disagree-flag")).to_contain_text("disagreed on 1 of the")
    expect(page.locator("#inspector .probe-token")).to_have_text(f'"{{" (id {brace})')
    expect(page.locator("#inspector .facts")).to_contain_text("depth before")
    page.wait_for_function(f"() => ({_AMBER_COLUMNS})() > 0")  # the timeline drew the mark
    marked = _amber_columns(page)
    page.click("#tok-1")
    expect(page.locator("#inspector")).to_have_attribute("data-index", "1")
    expect(page.locator("#inspector .disagree-flag")).to_have_count(0)
    assert _amber_columns(page) == marked, "only step 0 is marked"
    page.screenshot(path=str(ARTIFACTS / "disagreement.png"))
