"""The vendored page works offline under its Content-Security-Policy (#27, item 6): it compiles,
steps, runs and inspects with no violation reported (the ``page`` fixture fails on one)."""

from __future__ import annotations

from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import csp_violations


def test_the_page_works_under_its_csp(page: Page, live_server: str) -> None:
    answer = page.goto(live_server)
    assert answer is not None
    policy = answer.headers["content-security-policy"]
    assert "script-src 'self';" in policy and "unsafe-eval" not in policy
    assert answer.headers["x-frame-options"] == "DENY"
    # CodeMirror's own stylesheet (a <style> with the nonce) applies: its editor is a flex box.
    expect(page.locator("#editor .cm-editor")).to_have_css("display", "flex")
    page.select_option("#example", "pricing")
    expect(page.locator("#compile-result .stats")).to_contain_text("compiled", timeout=60_000)
    page.locator("header.topbar").click()
    for count in (1, 2, 3):
        page.keyboard.press("ArrowRight")
        expect(page.locator("#tokens .chip")).to_have_count(count, timeout=60_000)
    page.click("#tok-0")
    expect(page.locator("#inspector")).to_have_attribute("data-index", "0", timeout=60_000)
    page.keyboard.press("Backspace")
    expect(page.locator("#tokens .chip")).to_have_count(2, timeout=60_000)
    page.fill('input[name="max_tokens"]', "6")
    page.click("#btn-run")  # the stream, then the page's own fetch() POSTs with the token
    expect(page.locator("#status")).to_have_attribute("data-done", "true", timeout=60_000)
    expect(page.locator("#toast")).not_to_contain_text("CSRF")
    # No <style> but CodeMirror's carries the nonce (htmx's indicator styles are off).
    unsigned = page.evaluate(
        "() => [...document.querySelectorAll('style')].filter((s) => !s.nonce).length"
    )
    assert unsigned == 0


def test_the_page_cannot_be_framed(browser: Browser, live_server: str) -> None:
    """Another site's page framing the playground gets an empty frame (clickjacking)."""
    context = browser.new_context()
    try:
        framing = context.new_page()
        console: list[str] = []
        framing.on("console", lambda message: console.append(message.text))
        # No event says "refused": the console line that reports it does.
        with framing.expect_console_message(lambda message: "frame-ancestors" in message.text):
            framing.set_content(f'<iframe id="f" src="{live_server}/"></iframe>')
        expect(framing.frame_locator("#f").locator("header.topbar")).to_have_count(0)
        assert any("frame-ancestors" in line for line in csp_violations(console)), console
    finally:
        context.close()
