"""Issue 26, the page used for an hour: no stale state, steering like a debugger, errors where
the user looks. One regression test per numbered problem (``test_p1_`` ...), and the mechanism of
one inspector fetch per step; one server and one page for the module."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, Request, Route, expect

from tests.browser.answered import answered, wait_answered
from tests.browser.conftest import ARTIFACTS, REPORT_CSP_VIOLATIONS, csp_violations

_RUN_MS = 60_000
STALE = re.compile(r"\bstale\b")
UNIQUE = '{\n  "type": "array",\n  "items": {"type": "integer"},\n  "uniqueItems": true\n}'
BROKEN = '{"type": "object", "properties": {"a": {"type": "strin'
VERDICT = json.dumps(
    {"type": "object",
     "properties": {"final_recommendation": {"enum": ["hold", "reject", "approve"]}},
     "required": ["final_recommendation"]}, indent=2)  # fmt: skip
CONTACT = json.dumps(
    {"type": "object",
     "properties": {"email": {"type": "string", "format": "email"},
                    "tags": {"type": "array", "items": {"enum": ["red", "green"]}}}},
    indent=2)  # fmt: skip

_errors: list[str] = []
_console: list[str] = []


@pytest.fixture(scope="module")
def shared(browser: Browser, live_server: str) -> Iterator[Page]:
    """One 1440x900 page for the module."""
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    context.add_init_script(REPORT_CSP_VIOLATIONS)
    opened = context.new_page()
    opened.on("pageerror", lambda error: _errors.append(str(error)))
    opened.on("console", lambda message: _console.append(message.text))
    opened.on("dialog", lambda dialog: dialog.accept())
    yield opened
    context.close()


@pytest.fixture
def page(shared: Page) -> Iterator[Page]:
    """The module's page, its routes cleared; script errors and CSP violations fail the test."""
    _errors.clear()
    _console.clear()
    yield shared
    shared.unroute_all(behavior="ignoreErrors")
    assert _errors == [], _errors
    assert csp_violations(_console) == [], csp_violations(_console)
    bad = [m for m in _console if "Invalid position" in m]
    assert bad == [], bad


def _open(page: Page, live_server: str, example: str = "nested") -> None:
    page.goto(f"{live_server}/?example={example}")
    expect(page.locator("#compile-result .stats")).to_contain_text("compiled", timeout=_RUN_MS)
    page.locator("header.topbar").click()  # the keys go to the page


def _set_source(page: Page, text: str) -> None:
    page.evaluate("(text) => MS.setSource(text)", text)


def _run_to_end(page: Page, max_tokens: int) -> None:
    page.fill('input[name="max_tokens"]', str(max_tokens))
    page.locator("header.topbar").click()
    page.keyboard.press(" ")
    expect(page.locator("#status")).to_have_attribute("data-done", "true", timeout=_RUN_MS)


def _wait_held(page: Page, held: list[Route]) -> None:
    """Until a request the test holds has been sent."""
    for _ in range(600):
        if held:
            return
        page.wait_for_timeout(50)
    raise AssertionError("the request was never sent")


def _session_id(page: Page) -> str:
    return page.locator("#session").get_attribute("data-session-id") or ""


def test_p1_a_run_after_an_option_change_runs_in_the_new_session(
    page: Page, live_server: str
) -> None:
    _open(page, live_server)
    page.click('.compile-panel .tab-button[data-view="tests"]')  # the Tests: a tab of the panel
    page.fill("#test-text", '{"user": {}}')
    page.click("#btn-add-test")
    expect(page.locator("#tests-result .test-row")).to_have_count(1, timeout=_RUN_MS)
    _run_to_end(page, 8)
    old = _session_id(page)

    # The Tests' request for the new setup is in flight when space is pressed.
    held: list[Route] = []
    page.route("**/ui/tests", lambda route: held.append(route))
    runs: list[Request] = []
    page.on("request", lambda r: runs.append(r) if r.url.endswith("/run") else None)
    page.select_option("#preset", "vllm")
    _wait_held(page, held)
    page.click("#tok-3")
    page.keyboard.press(" ")
    expect(page.locator(f"#session:not([data-session-id='{old}'])")).to_have_count(1)
    for route in held:
        route.continue_()
    expect(page.locator("#status")).to_have_attribute("data-done", "true", timeout=_RUN_MS)
    expect(page.locator("#tokens .chip")).to_have_count(8)
    new = _session_id(page)
    assert new != old
    assert page.evaluate("maskscope.ui.sessionId") == new
    assert runs and all(f"/ui/sessions/{new}/run" in r.url for r in runs), [r.url for r in runs]
    assert all(r.headers.get("x-maskscope-session") is not None for r in runs)
    page.evaluate("() => document.querySelector('#tests-result .remove-test').click()")


def test_p2_the_doctor_of_an_old_setup_is_dropped_with_its_marks(
    page: Page, live_server: str
) -> None:
    _open(page, live_server)
    _set_source(page, UNIQUE)
    page.click('.compile-panel .tab-button[data-view="doctor"]')
    expect(page.locator("#doctor-result .doctor-backends")).to_be_visible(timeout=_RUN_MS)
    expect(page.locator("#editor .cm-lint-marker-warning")).to_have_count(1)
    expect(page.locator("#doctor-flag")).not_to_have_text("")

    # A broken source: the findings, the badge and the marks of the old one go at once.
    _set_source(page, BROKEN)
    expect(page.locator("#doctor-result .doctor-backends")).to_have_count(0)
    expect(page.locator("#doctor-flag")).to_have_text("")
    expect(page.locator("#editor .cm-lint-marker-warning")).to_have_count(0)
    expect(page.locator("#compile-result")).to_contain_text("does not compile")

    # The Doctor still examining the old source when the broken one comes: its answer is dropped.
    held: list[Route] = []
    page.route("**/ui/doctor", lambda route: held.append(route))
    _set_source(page, UNIQUE)
    _wait_held(page, held)
    _set_source(page, BROKEN)
    expect(page.locator("#compile-result")).to_contain_text("does not compile")
    assert held
    since = answered(page)
    with page.expect_response("**/ui/doctor", timeout=_RUN_MS):
        held[-1].continue_()
    wait_answered(page, r"/ui/doctor$", since=since)  # the old answer handled: dropped, unswapped
    expect(page.locator("#doctor-result .doctor-backends")).to_have_count(0)
    expect(page.locator("#doctor-flag")).to_have_text("")
    expect(page.locator("#editor .cm-lint-marker-warning")).to_have_count(0)
    page.click('.compile-panel .tab-button[data-view="compile"]')


def test_p3_a_new_replay_clears_the_inspector_of_the_old_one(page: Page, live_server: str) -> None:
    _open(page, live_server)
    page.click("label.tab:has(input[value=replay])")
    page.fill("#replay-text", '{"user": {"id": 42, "profile": {"display_name": "Ada"}}}')
    page.click("#btn-replay")
    expect(page.locator("#replay-result .chip").nth(9)).to_be_visible()
    page.locator("#replay-result .chip").nth(9).click()
    expect(page.locator("#inspector")).to_contain_text("Replayed token #9")

    page.fill("#replay-text", "[1]")
    page.click("#btn-replay")
    expect(page.locator("#replay-result")).to_contain_text("refused")
    expect(page.locator("#inspector")).not_to_contain_text("Replayed token #9")
    # The arrows walk the new replay, not the old one.
    page.locator("header.topbar").click()
    page.keyboard.press("ArrowRight")
    expect(page.locator("#inspector")).to_contain_text("Replayed token #0")
    page.click("label.tab:has(input[value=generate])")


def _force_an_alternative(page: Page) -> int:
    """Force an allowed token other than the one taken at an earlier step: that step's index."""
    alternatives = page.locator("#inspector .topk tr.allowed:not(.chosen-row) button.force")
    count = page.locator("#tokens .chip").count()
    for at in range(count - 1):
        page.click(f"#tok-{at}")
        expect(page.locator("#inspector")).to_have_attribute("data-index", str(at))
        if alternatives.count():
            alternatives.first.click()
            expect(page.locator("#tokens .chip")).to_have_count(at + 1)
            return at
    raise AssertionError("no step with a choice")


def test_p4_the_forced_note_goes_with_its_session(page: Page, live_server: str) -> None:
    _open(page, live_server)
    note = page.locator("#discarded-note")
    _run_to_end(page, 12)
    _force_an_alternative(page)
    expect(note).to_contain_text("Undo (Backspace) restores them")
    page.click("#btn-reset")
    expect(note).to_be_hidden()

    _run_to_end(page, 12)
    _force_an_alternative(page)
    expect(note).to_be_visible()
    page.locator("header.topbar").click()
    page.keyboard.press(" ")  # a run to the end
    expect(page.locator("#status")).to_have_attribute("data-done", "true", timeout=_RUN_MS)
    expect(note).to_be_hidden()

    _force_an_alternative(page)
    expect(note).to_be_visible()
    page.select_option("#example", "pricing")
    expect(note).to_be_hidden()


def test_p5_a_source_over_the_limit_is_said_in_the_compile_panel(
    page: Page, live_server: str
) -> None:
    _open(page, live_server)
    expect(page.locator("#compile-result .stats")).to_contain_text("bytes")
    big = '{"description": "' + "x" * 475_000 + '"}'
    _set_source(page, big)
    result = page.locator("#compile-result")
    expect(result).to_contain_text("the source is 464 KB: over the 256 KB limit", ignore_case=True)
    expect(page.locator("#compile-result .stats")).to_have_count(0)
    expect(result).not_to_contain_text("compiled")
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator(".compile-panel").screenshot(path=str(ARTIFACTS / "page-state-p5-too-large.png"))


def test_p8_any_allowed_token_can_be_forced(page: Page, live_server: str) -> None:
    _open(page, live_server)
    _set_source(page, VERDICT)
    expect(page.locator("#compile-result .stats")).to_contain_text("compiled")
    _run_to_end(page, 12)
    rows = page.locator("#inspector .allowed-list tbody tr:not(.chosen-row)")
    count = page.locator("#tokens .chip").count()
    for at in range(count):
        page.click(f"#tok-{at}")
        expect(page.locator("#inspector")).to_have_attribute("data-index", str(at))
        if rows.count() >= 2:
            break
    else:
        raise AssertionError("no step with two allowed tokens besides the one taken")

    # From the allowed list.
    first = rows.nth(0).locator("button.force")
    token = first.get_attribute("data-token-id")
    first.click()
    expect(page.locator(f"#tok-{at}.forced")).to_have_attribute("data-token-id", str(token))

    # From the token search: the text of another allowed token (Undo first brings back the
    # steps the force discarded).
    page.locator("header.topbar").click()
    page.keyboard.press("Backspace")
    expect(page.locator("#tokens .chip")).to_have_count(count)
    page.click(f"#tok-{at}")
    expect(page.locator("#inspector")).to_have_attribute("data-index", str(at))
    other = rows.nth(1)
    text = other.locator(".tok").inner_text().replace("·", " ")
    token = other.locator("button.force").get_attribute("data-token-id")
    page.fill("#token-search", text)
    pick = page.locator(f'#search-results button.force[data-token-id="{token}"]')
    expect(pick).to_have_count(1)
    pick.click()
    expect(page.locator(f"#tok-{at}.forced")).to_have_attribute("data-token-id", str(token))

    # From the mask picture: a click on the token's cell.
    page.locator("header.topbar").click()
    page.keyboard.press("Backspace")
    expect(page.locator("#tokens .chip")).to_have_count(count)
    page.click(f"#tok-{at}")
    expect(page.locator("#inspector")).to_have_attribute("data-index", str(at))
    page.wait_for_function("() => document.querySelector('#mask-canvas').width === 256")
    token = rows.nth(0).locator("button.force").get_attribute("data-token-id")
    canvas = page.locator("#mask-canvas")
    box = canvas.bounding_box()
    size = page.evaluate(
        "() => ['width', 'height'].map((k) => mask_canvas()[k])".replace(
            "mask_canvas()", "document.querySelector('#mask-canvas')"
        )
    )
    assert box is not None
    cell = int(str(token))
    x = (cell % size[0] + 0.5) * box["width"] / size[0]
    y = (cell // size[0] + 0.5) * box["height"] / size[1]
    canvas.click(position={"x": x, "y": y})
    expect(page.locator(f"#tok-{at}.forced")).to_have_attribute("data-token-id", str(token))
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "page-state-p8-forced-from-the-picture.png"))


def test_p9_arrows_move_the_selection_and_backspace_undoes(page: Page, live_server: str) -> None:
    _open(page, live_server)
    chips = page.locator("#tokens .chip")
    for count in (1, 2, 3, 4):
        page.keyboard.press("ArrowRight")
        expect(chips).to_have_count(count, timeout=_RUN_MS)
    page.keyboard.press("ArrowLeft")
    page.keyboard.press("ArrowLeft")
    expect(page.locator("#tok-1.selected")).to_have_count(1)
    expect(page.locator("#inspector")).to_have_attribute("data-index", "1")
    expect(chips).to_have_count(4)  # ← moves, never deletes
    page.keyboard.press("ArrowRight")
    expect(page.locator("#inspector")).to_have_attribute("data-index", "2")
    expect(chips).to_have_count(4)

    # Undo takes the last step away, whichever is selected.
    page.keyboard.press("Backspace")
    expect(chips).to_have_count(3)
    page.click("#btn-back")
    expect(chips).to_have_count(2)
    page.keyboard.press("ArrowRight")  # on the last step: a new step
    expect(chips).to_have_count(3)

    # At the end of a run, Step and → cannot act: disabled, and → only moves the selection.
    page.keyboard.press(" ")
    expect(page.locator("#status")).to_have_attribute("data-done", "true", timeout=_RUN_MS)
    n = chips.count()
    expect(page.locator("#btn-step")).to_be_disabled()
    expect(page.locator("#btn-run")).to_be_disabled()
    expect(page.locator("#btn-back")).to_be_enabled()
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowLeft")
    expect(page.locator("#inspector")).to_have_attribute("data-index", str(n - 2))
    expect(chips).to_have_count(n)
    # A new setup: Step can act again (it starts a new session).
    page.select_option("#preset", "vllm")
    expect(page.locator("#btn-step")).to_be_enabled()

    # The same keys on the Replay tab.
    page.click("label.tab:has(input[value=replay])")
    page.click("#btn-replay")
    expect(page.locator("#replay-result .chip").first).to_be_visible()
    refused = int(page.locator("#replay-result .chip").last.get_attribute("data-index") or "0")
    expect(page.locator("#inspector")).to_contain_text(f"Replayed token #{refused}")
    page.locator("header.topbar").click()
    page.keyboard.press("ArrowLeft")
    page.keyboard.press("ArrowLeft")
    expect(page.locator("#inspector")).to_contain_text(f"Replayed token #{refused - 2}")
    page.keyboard.press("ArrowRight")
    expect(page.locator("#inspector")).to_contain_text(f"Replayed token #{refused - 1}")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "page-state-p9-replay-keys.png"))
    page.click("label.tab:has(input[value=generate])")


def test_p11_replay_names_the_item_and_a_format_cause(page: Page, live_server: str) -> None:
    _open(page, live_server)
    _set_source(page, CONTACT)
    expect(page.locator("#compile-result .stats")).to_contain_text("compiled")
    page.click("label.tab:has(input[value=replay])")
    cause = page.locator("#replay-result .replay-cause")
    page.fill("#replay-text", '{"email": "not-an-email"}')
    page.click("#btn-replay")
    expect(cause).to_contain_text('$.email must be an email address (format "email")')
    page.fill("#replay-text", '{"tags": ["red", "blue"]}')
    page.click("#btn-replay")
    expect(cause).to_contain_text('$.tags[1] must be one of "red" | "green"')
    page.click("label.tab:has(input[value=generate])")


def test_one_inspector_fetch_per_step_during_a_run(page: Page, live_server: str) -> None:
    _open(page, live_server)
    fetched: list[str] = []
    pattern = re.compile(r"/ui/sessions/[^/]+/steps/(\d+)$")

    def seen(request: Request) -> None:
        found = pattern.search(request.url)
        if found:
            fetched.append(found.group(1))

    page.on("request", seen)
    _run_to_end(page, 24)
    # Still: the last step shown, no inspector fetch in flight and none wanted.
    page.wait_for_function(
        """() => { const ui = window.maskscope.ui;
          const chips = document.querySelectorAll('#tokens .chip');
          const shown = document.querySelector('#inspector').dataset;
          return !ui.inspectorBusy && ui.inspectorWanted === null && shown.session === ui.sessionId
            && shown.index === String(chips.length - 1); }"""
    )
    page.remove_listener("request", seen)
    twice = {i: n for i, n in Counter(fetched).items() if n > 1}
    assert fetched and twice == {}, fetched
    last = page.locator("#tokens .chip").count() - 1
    expect(page.locator("#inspector")).to_have_attribute("data-index", str(last))
