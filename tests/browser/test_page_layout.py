"""The page's layout, first use and export (#26): one test per numbered problem it owns, on one
server and one page for the module. Screenshots at 1440x900 and 1280x720 go to test-artifacts/."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import (
    Browser,
    FloatRect,
    Page,
    Request,
    Route,
    ViewportSize,
    expect,
)

from tests.browser.answered import answered, wait_answered
from tests.browser.conftest import REPORT_CSP_VIOLATIONS, csp_violations, shot

WIDE: ViewportSize = {"width": 1440, "height": 900}
SMALL: ViewportSize = {"width": 1280, "height": 720}
LONG_ENUM = (
    '{"type": "object", "properties": {"tier": {"type": "string", "enum": ['
    + ", ".join(f'"a-rather-long-tier-name-number-{i}"' for i in range(12))
    + ']}}, "required": ["tier"]}'
)
PASTED_MODEL = (
    "from pydantic import BaseModel\n\n\n"
    "class CandidateEvaluation(BaseModel):\n    name: str\n    hire: bool\n"
)


class Shared:
    """The module's page, the console errors it raised, and the requests it sent."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.errors: list[str] = []
        self.console: list[str] = []
        self.requests: list[str] = []
        page.on("pageerror", lambda error: self.errors.append(str(error)))
        page.on("console", lambda message: self.console.append(message.text))
        page.on("request", self._sent)

    def _sent(self, request: Request) -> None:
        self.requests.append(request.url)

    def vocab_requests(self) -> int:
        return sum("/api/vocab" in url for url in self.requests)

    def fresh(self, url: str, viewport: ViewportSize) -> Page:
        """The page at ``viewport`` on ``url`` as on a first visit (no stored layout)."""
        self.page.set_viewport_size(viewport)
        self.page.goto(url)
        self.page.evaluate("() => localStorage.clear()")
        self.page.goto("about:blank")  # the old document sends nothing more
        self.requests.clear()
        self.page.goto(url)
        return self.page


@pytest.fixture(scope="module")
def shared(browser: Browser) -> Iterator[Shared]:
    context = browser.new_context(viewport=WIDE)
    context.add_init_script(REPORT_CSP_VIOLATIONS)
    one = Shared(context.new_page())
    yield one
    context.close()
    assert one.errors == [], one.errors
    assert csp_violations(one.console) == [], csp_violations(one.console)


pytestmark = pytest.mark.usefixtures("patient")


def _box(page: Page, selector: str) -> FloatRect:
    box = page.locator(selector).first.bounding_box()
    assert box is not None, f"{selector} is not displayed"
    return box


def _in_view(page: Page, selector: str) -> None:
    """The element is displayed whole inside the window, without scrolling anything."""
    box, size = _box(page, selector), page.viewport_size
    assert size is not None
    assert box["x"] >= 0 and box["y"] >= 0, (selector, box)
    assert box["x"] + box["width"] <= size["width"] + 1, (selector, box, size)
    assert box["y"] + box["height"] <= size["height"] + 1, (selector, box, size)
    # and not clipped by a scrolling column or covered: its top and bottom rows are hit
    whole = page.evaluate(
        """(sel) => { const el = document.querySelector(sel); const r = el.getBoundingClientRect();
          const x = r.left + r.width / 2;
          const hit = (y) => el.contains(document.elementFromPoint(x, y));
          return hit(r.top + 2) && hit(r.bottom - 2); }""",
        selector,
    )
    assert whole, f"{selector} is cut off or covered"


def _below(page: Page, upper: str, lower: str) -> None:
    """``lower`` starts below the end of ``upper``: nothing is drawn over it."""
    assert _box(page, lower)["y"] >= _box(page, upper)["y"] + _box(page, upper)["height"] - 1


def _set_source(page: Page, text: str) -> None:
    page.evaluate("(text) => MS.setSource(text)", text)


def _compiled(page: Page) -> None:
    expect(page.locator("#compile-result .stats")).to_contain_text("compiled")


def _add_test(page: Page, text: str) -> None:
    page.click('.compile-panel .tab-button[data-view="tests"]')
    rows = page.locator("#tests-result .test-row").count()
    page.fill("#test-text", text)
    page.click("#btn-add-test")
    expect(page.locator("#tests-result .test-row")).to_have_count(rows + 1)


def test_p10_tests_go_with_their_setup(shared: Shared, live_server: str) -> None:
    page = shared.fresh(f"{live_server}/?example=nested", WIDE)
    _compiled(page)
    _add_test(page, '{"user": {}}')
    # a kind change: the tests written for the JSON Schema go with it
    page.click('label.tab:has(input[name="kind"][value="regex"])')
    expect(page.locator("#tests-result .test-row")).to_have_count(0)
    assert page.evaluate("() => JSON.parse(maskscopeTests.json())") == []
    expect(page.locator("#tests-flag")).to_have_text("")
    page.click('label.tab:has(input[name="kind"][value="json_schema"])')
    _compiled(page)
    # loading an example: the same
    _add_test(page, '{"user": {}}')
    page.select_option("#example", "pricing")
    expect(page.locator("#tests-result .test-row")).to_have_count(0)
    assert page.evaluate("() => JSON.parse(maskscopeTests.json())") == []
    _compiled(page)

    # the tests of a permalink being opened stay with it
    body = {
        "grammar": {"kind": "regex", "source": "[a-z]{4}"}, "raw_prompt": "A word:",
        "max_tokens": 4, "actions": [], "tests": [{"text": "abcd", "expect": "pass"}],
    }  # fmt: skip
    snapshot_id = httpx.post(f"{live_server}/api/permalinks", json=body, timeout=60).json()["id"]
    page.goto(f"{live_server}/s/{snapshot_id}")
    page.click('.compile-panel .tab-button[data-view="tests"]')
    expect(page.locator("#tests-result .test-row")).to_have_count(1)
    expect(page.locator("#compile-result .stats")).to_contain_text("compiled")
    expect(page.locator("#tests-result .test-row")).to_have_count(1)


def test_p6_the_compile_options_sit_beside_the_kind_tabs(shared: Shared, live_server: str) -> None:
    page = shared.fresh(live_server, WIDE)
    _compiled(page)
    tabs = _box(page, 'label.tab:has(input[name="kind"][value="json_schema"])')
    for selector in ("#preset", "#engine", "#compare", 'input[name="any_whitespace"]',
                     'input[name="strict_mode"]'):  # fmt: skip
        _in_view(page, selector)
        box = _box(page, selector)
        assert abs((box["y"] + box["height"] / 2) - (tabs["y"] + tabs["height"] / 2)) < 24, selector
    # a vLLM user finds its preset at once, and picking it is one click away from the kinds
    expect(page.locator("#preset option", has_text="vLLM")).to_have_count(1)
    page.select_option("#preset", "vllm")
    expect(page.locator('input[name="any_whitespace"]')).to_be_checked()
    page.select_option("#preset", "maskscope")
    # a preset's options compile again: the stats are back once that compile is done
    expect(page.locator("#compile-result .stats")).to_contain_text("compiled")
    page.locator("header.topbar").click()
    page.keyboard.press("ArrowRight")
    expect(page.locator("#tokens .chip")).to_have_count(1)
    shot(page, "layout-1440x900")
    shown = ("#editor", "#tokens", "#timeline", ".timeline-legend", "#compile-result .stats")
    for selector in shown:
        expect(page.locator(selector).first).to_be_visible()  # a panel redrawn after the step
        _in_view(page, selector)


def test_p10_the_tests_table_is_wide_and_the_editor_keeps_its_height(
    shared: Shared, live_server: str
) -> None:
    page = shared.fresh(live_server, WIDE)
    _compiled(page)
    editor_before = _box(page, "#editor")["height"]
    page.click('.compile-panel .tab-button[data-view="tests"]')
    page.fill("#test-text", '{"name": "Jane", "email": "jane@example.com", "tags": ["a", "b"]}')
    page.select_option("#test-expect", "fail")
    page.click("#btn-add-test")
    expect(page.locator("#tests-result .test-row")).to_have_count(1)
    assert _box(page, "#tests-result .tests-table")["width"] >= 700
    assert _box(page, "#tests-result .test-text")["width"] >= 200  # not five characters wide
    assert abs(_box(page, "#editor")["height"] - editor_before) <= 2  # the editor is spared

    # resized by its top edge, maximised over the editor and the output, restored
    body_before = _box(page, ".dock-body")["height"]
    handle = _box(page, "#dock-handle")
    page.mouse.move(handle["x"] + 200, handle["y"] + handle["height"] / 2)
    page.mouse.down()
    page.mouse.move(handle["x"] + 200, handle["y"] - 100, steps=5)
    page.mouse.up()
    assert _box(page, ".dock-body")["height"] >= body_before + 90
    page.click("#btn-dock-max")
    assert _box(page, "#dock")["height"] >= 650
    shot(page, "layout-1440x900-tests-maximised")
    page.click("#btn-dock-max")
    assert _box(page, "#dock")["height"] < 650
    page.evaluate("() => localStorage.clear()")


def test_p14_a_first_visit_has_an_example_and_fits_1280x720(
    shared: Shared, live_server: str
) -> None:
    page = shared.fresh(live_server, SMALL)
    expect(page.locator("#example")).not_to_have_value("")
    _compiled(page)
    assert page.evaluate("() => MS.source().trim().length") > 0
    _in_view(page, "#editor")
    _in_view(page, "#timeline")
    _in_view(page, "#btn-run")
    page.locator("header.topbar").click()
    page.keyboard.press("ArrowRight")
    expect(page.locator("#tokens .chip")).to_have_count(1)
    shot(page, "layout-1280x720")
    _in_view(page, "#tokens")
    _in_view(page, "#timeline")
    _below(page, "#tokens", ".output-tools")

    # the Tests help is whole, in the wide panel
    page.click('.compile-panel .tab-button[data-view="tests"]')
    note = page.locator(".tests-note")
    expect(note).to_be_visible()
    assert page.evaluate(
        "() => { const n = document.querySelector('.tests-note');"
        " return n.scrollWidth <= n.clientWidth + 1 && n.getBoundingClientRect().width >= 600; }"
    )
    page.click('.compile-panel .tab-button[data-view="compile"]')

    # an empty editor says how to start, not "invalid JSON: Expecting value"
    _set_source(page, "")
    expect(page.locator("#compile-result.empty-source")).to_contain_text("pick an example")
    expect(page.locator("#session-area .stale-note")).to_be_visible()
    _below(page, "#tokens", ".output-tools")  # the stale note pushes, never overlaps
    # A late compile answer (one sent before the editor was emptied) keeps the hint: the compile
    # trigger fired now takes the place of any pending (its debounce) or in flight (hx-sync).
    since = answered(page)
    page.evaluate("() => htmx.trigger(document.body, 'compile')")
    wait_answered(page, r"/ui/compile$", since=since)
    expect(page.locator("#compile-result.empty-source")).to_contain_text("pick an example")
    expect(page.locator("#compile-result .compile-error")).to_have_count(0)
    expect(page.locator("#compile-summary .badge.bad")).to_have_count(0)
    shot(page, "layout-1280x720-empty")
    page.set_viewport_size(WIDE)


def test_p13_the_compiled_grammar_is_not_cut_off_on_the_right(
    shared: Shared, live_server: str
) -> None:
    page = shared.fresh(live_server, WIDE)
    _compiled(page)
    _set_source(page, LONG_ENUM)
    expect(page.locator("#compile-result .grammar-text")).to_contain_text("number-11")
    assert page.evaluate(
        "() => { const g = document.querySelector('#compile-result .grammar-text');"
        " return g.scrollWidth <= g.clientWidth + 1; }"
    ), "the grammar's long rule is cut off on the right"


def test_p13_the_vocabulary_is_fetched_once_in_the_background(
    shared: Shared, live_server: str
) -> None:
    page = shared.fresh(live_server, WIDE)
    _compiled(page)
    # after load, before any chip is clicked
    page.wait_for_function("() => Object.keys(window.maskscope.ui.vocabs).length > 0")
    # its answer read: the cache now holds it, so nothing asks again
    page.evaluate("() => Promise.all(Object.values(window.maskscope.ui.vocabs)).then(() => true)")
    assert shared.vocab_requests() == 1
    page.locator("header.topbar").click()
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    expect(page.locator("#tokens .chip")).to_have_count(2)
    page.locator("#tok-0").click()
    expect(page.locator("#inspector")).to_have_attribute("data-index", "0")
    page.fill("#token-search", "{")
    expect(page.locator("#search-results li").first).to_be_visible()
    assert shared.vocab_requests() == 1


def test_p7_a_paste_replaces_the_untouched_pydantic_starter(
    shared: Shared, live_server: str
) -> None:
    page = shared.fresh(live_server, WIDE)
    _compiled(page)
    page.click("text=Pydantic")
    expect(page.locator("#editor .cm-content")).to_contain_text("class Answer")
    page.locator("#editor .cm-content").click()
    page.evaluate(
        """(text) => {
          const data = new DataTransfer();
          data.setData("text/plain", text);
          document.querySelector("#editor .cm-content").dispatchEvent(
            new ClipboardEvent("paste", { clipboardData: data, bubbles: true, cancelable: true }));
        }""",
        PASTED_MODEL,
    )
    assert page.evaluate("() => MS.source()") == PASTED_MODEL
    derived = page.locator("#compile-result .derived summary")
    expect(derived).to_contain_text("models: CandidateEvaluation")
    expect(derived).not_to_contain_text("Answer")
    # once edited, the source is the user's: a second paste joins it
    page.evaluate(
        """(text) => {
          const data = new DataTransfer();
          data.setData("text/plain", text);
          document.querySelector("#editor .cm-content").dispatchEvent(
            new ClipboardEvent("paste", { clipboardData: data, bubbles: true, cancelable: true }));
        }""",
        "\n# a comment\n",
    )
    assert "class CandidateEvaluation" in page.evaluate("() => MS.source()")
    page.click("text=JSON Schema")


def test_p12_a_permalink_shows_progress_and_opens_at_the_shared_step(
    shared: Shared, live_server: str
) -> None:
    body = {
        "grammar": {"kind": "regex", "source": "[a-z ]{300}"},  # ten steps never end it
        "raw_prompt": "A story:", "max_tokens": 12, "actions": [{"op": "step", "n": 10}],
    }  # fmt: skip
    snapshot_id = httpx.post(f"{live_server}/api/permalinks", json=body, timeout=60).json()["id"]
    page = shared.page
    held: list[Route] = []
    page.route("**/ui/permalinks/*/open", lambda route: held.append(route))  # the test holds it
    try:
        page.goto(f"{live_server}/s/{snapshot_id}?step=3")
        while not held:
            page.wait_for_timeout(50)
        # while the session is rebuilt: progress, not the idle "Press space to run"
        replaying = page.locator("#session-area #replaying")
        expect(replaying).to_contain_text("Replaying the shared trace: 10 steps")
        expect(replaying).to_contain_text("step #3 is inspected")
        expect(page.locator("#session-area")).not_to_contain_text("Press space")
        # shared through the API, without a session: no recorded trace, as before
        expect(page.locator("#recorded-trace")).to_have_count(0)
        assert held[0].request.post_data is not None and "step=3" in held[0].request.post_data
        held[0].continue_()
    finally:
        page.unroute("**/ui/permalinks/*/open")
    expect(page.locator("#tokens .chip")).to_have_count(10)
    expect(page.locator("#inspector")).to_have_attribute("data-index", "3")  # not the last, #9
    expect(page.locator("#tok-3")).to_have_class(re.compile(r"\bselected\b"))
    expect(page.locator("#replaying")).to_have_count(0)

    # past the end: the last step; without ?step: the last step
    page.goto(f"{live_server}/s/{snapshot_id}?step=99")
    expect(page.locator("#inspector")).to_have_attribute("data-index", "9")
    page.goto(f"{live_server}/s/{snapshot_id}")
    expect(page.locator("#inspector")).to_have_attribute("data-index", "9")
    expect(page.locator("#tokens .chip")).to_have_count(10)


def test_p12_a_permalink_paints_its_recorded_trace_before_the_live_session(
    shared: Shared, live_server: str
) -> None:
    page = shared.fresh(f"{live_server}/?example=nested", WIDE)
    _compiled(page)
    page.fill('input[name="max_tokens"]', "8")
    page.locator("header.topbar").click()
    page.keyboard.press(" ")
    expect(page.locator("#status")).to_have_attribute("data-done", "true")
    live_ids = page.locator("#tokens .chip").evaluate_all("cs => cs.map(c => c.dataset.tokenId)")
    page.locator("#tok-5").click()
    expect(page.locator("#inspector")).to_have_attribute("data-index", "5")
    page.click("#btn-share")
    link = page.locator("#share-result .share-link")
    expect(link).to_have_count(1)
    url = link.get_attribute("data-url")
    assert url and url.endswith("?step=5"), url

    held: list[Route] = []
    page.route("**/ui/permalinks/*/open", lambda route: held.append(route))  # the test holds it
    try:
        page.goto(url)
        while not held:
            page.wait_for_timeout(50)
        # the live session is not there yet: the chips are the ones recorded at share time
        recorded = page.locator("#session-area #recorded-tokens .chip")
        expect(recorded).to_have_count(8)
        assert recorded.evaluate_all("cs => cs.map(c => c.dataset.tokenId)") == live_ids
        expect(page.locator("#recorded-tokens .chip.selected")).to_have_attribute(
            "data-index", "5"
        )  # ?step, before the live session
        expect(page.locator("#recorded-trace")).to_contain_text("recorded")
        expect(page.locator("#replaying progress")).to_be_visible()  # rebuilt behind, in view
        expect(page.locator("#tokens .chip")).to_have_count(0)
        assert (
            page.locator("#recorded-tokens .chip").first.evaluate(
                "c => Number(getComputedStyle(c).opacity)"
            )
            < 1
        )  # greyed until replaced
        shot(page, "page-12-recorded-trace-1440")
        held[0].continue_()
    finally:
        page.unroute("**/ui/permalinks/*/open")
    expect(page.locator("#tokens .chip")).to_have_count(8)
    expect(page.locator("#recorded-trace")).to_have_count(0)  # replaced by the live session
    expect(page.locator("#inspector")).to_have_attribute("data-index", "5")
    assert page.locator("#tokens .chip").evaluate_all("cs => cs.map(c => c.dataset.tokenId)") == (
        live_ids
    )


def test_p12_share_names_the_selected_step_and_the_link_reopens_there(
    shared: Shared, live_server: str
) -> None:
    page = shared.fresh(f"{live_server}/?example=nested", WIDE)
    _compiled(page)
    page.fill('input[name="max_tokens"]', "8")
    page.locator("header.topbar").click()
    page.keyboard.press(" ")
    expect(page.locator("#status")).to_have_attribute("data-done", "true")
    page.locator("#tok-4").click()
    expect(page.locator("#inspector")).to_have_attribute("data-index", "4")
    page.click("#btn-share")
    link = page.locator("#share-result .share-link")
    expect(link).to_have_count(1)
    url = link.get_attribute("data-url")
    assert url and "/s/" in url and url.endswith("?step=4"), url
    expect(link.locator("input")).to_have_value(url)
    page.goto(url)
    expect(page.locator("#tokens .chip")).to_have_count(8)
    expect(page.locator("#inspector")).to_have_attribute("data-index", "4")
    expect(page.locator("#tok-4")).to_have_class(re.compile(r"\bselected\b"))
