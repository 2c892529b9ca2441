"""The Code dialog in a real browser: open it on a session, pick a target, copy its snippet."""

from __future__ import annotations

import httpx
from playwright.sync_api import Page, expect

from tests.browser.conftest import ARTIFACTS


def test_the_code_dialog_copies_the_snippet_of_the_open_session(
    page: Page, live_server: str
) -> None:
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server)
    page.goto(f"{live_server}/?example=pricing")
    expect(page.locator("#compile-result .stats")).to_contain_text("compiled")
    page.fill('input[name="temperature"]', "0.8")
    page.click("#btn-step")
    expect(page.locator("#tokens .chip")).to_have_count(1, timeout=60_000)
    session_id = page.evaluate("() => window.maskscope.ui.sessionId")

    page.click("#btn-code")
    dialog = page.locator("#code-dialog")
    expect(dialog).to_be_visible()
    expect(dialog.locator(".code-tabs .tab")).to_have_count(10)
    expect(dialog.locator('.code-panel[data-target="vllm"] code')).to_contain_text(
        '"structured_outputs": {"json": SCHEMA}'
    )
    expect(dialog.locator('.code-panel[data-target="vllm"] .not-expressible')).to_contain_text(
        "separators"
    )
    dialog.locator(".code-tabs .tab", has_text="curl · vLLM").click()
    panel = dialog.locator('.code-panel[data-target="curl_vllm"]')
    expect(panel).to_be_visible()
    expect(dialog.locator('.code-panel[data-target="vllm"]')).to_be_hidden()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "export.png"))

    panel.locator("button.copy").click()
    expect(panel.locator("button.copy")).to_have_text("Copied")
    copied = page.evaluate("() => navigator.clipboard.readText()")
    # The session's own request, with the seed it drew: what GET /api/export answers for it.
    api = httpx.get(
        f"{live_server}/api/export",
        params={"target": "curl_vllm", "session": session_id},
        timeout=60,
    )
    assert copied == api.json()["code"]
    assert '"temperature": 0.8' in copied and '"seed": ' in copied

    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
