"""The Tests panel in a real browser: add tests, see the verdicts, open one in Replay, share,
reopen the link, see them again."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.browser.conftest import ARTIFACTS

SCHEMA = '{\n  "type": "array",\n  "items": {"type": "integer"},\n  "uniqueItems": true\n}'


def _show_tests(page: Page) -> None:
    """The Tests tab of the wide panel under the editor and the output."""
    page.click('.compile-panel .tab-button[data-view="tests"]')


def _add(page: Page, text: str, expect_value: str) -> None:
    _show_tests(page)
    page.fill("#test-text", text)
    page.select_option("#test-expect", expect_value)
    page.click("#btn-add-test")


def _verdicts(page: Page) -> list[str]:
    rows = page.locator("#tests-result .test-row")
    return [" ".join(rows.nth(i).inner_text().split()) for i in range(rows.count())]


def test_tests_are_judged_shared_and_restored(page: Page, live_server: str) -> None:
    page.goto(live_server)
    page.locator("#editor .cm-content").click()
    page.keyboard.press("Control+A")
    page.keyboard.insert_text(SCHEMA)
    expect(page.locator("#compile-result .stats")).to_contain_text("compiled")

    _add(page, "[1,2]", "pass")
    expect(page.locator("#tests-result .test-row")).to_have_count(1)
    _add(page, "[1,1]", "fail")
    expect(page.locator("#tests-result .test-row")).to_have_count(2)
    _add(page, '[1, "a"]', "fail")
    rows = page.locator("#tests-result .test-row")
    expect(rows).to_have_count(3)
    expect(rows.nth(0)).to_contain_text("pass")
    expect(rows.nth(0)).to_contain_text("(as written: refuses at 3)")
    expect(rows.nth(1)).to_contain_text("FAIL")  # the grammar lets the duplicate through
    expect(rows.nth(1).locator(".disagree")).to_have_count(1)
    expect(rows.nth(2)).to_contain_text("refuses at 4")
    expect(page.locator("#tests-flag")).to_have_text("1")
    before = _verdicts(page)
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator("#tests-panel").screenshot(path=str(ARTIFACTS / "tests-panel.png"))
    page.screenshot(path=str(ARTIFACTS / "tests.png"), full_page=True)

    # a test opens in Replay, at the refused token
    rows.nth(2).locator(".grammar-verdict").click()
    expect(page.locator(".replay-view")).to_be_visible()
    expect(page.locator("#replay-text")).to_have_value('[1, "a"]')
    expect(page.locator("#replay-result .chip.refused.selected")).to_have_count(1)
    expect(page.locator("#inspector")).to_contain_text("allowed")

    # share (a permalink holds a session: take a step first), then reopen the link
    page.click('label.tab:has(input[name="mode"][value="generate"])')
    page.click("#btn-step")
    expect(page.locator("#tokens .chip")).to_have_count(1, timeout=60_000)
    page.click("#btn-share")
    link = page.locator("#share-result .share-link")
    expect(link).to_have_count(1)
    url = link.get_attribute("data-url")
    assert url and "/s/" in url
    page.goto(url)
    _show_tests(page)
    expect(page.locator("#tests-result .test-row")).to_have_count(3, timeout=60_000)
    # shown pending at once, then judged by the page
    expect(page.locator("#tests-result .test-row.pending")).to_have_count(0, timeout=60_000)
    assert _verdicts(page) == before
    expect(page.locator("#tests-result .differs")).to_have_count(0)
    expect(page.locator("#tests-flag")).to_have_text("1")
