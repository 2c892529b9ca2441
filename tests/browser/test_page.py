"""The page as a schema designer lives in it (#18): one test per problem the issue numbered."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import Dialog, Locator, Page, Route, expect

from tests.browser.conftest import shot
from tests.browser.test_playground import _lit_cells

pytestmark = pytest.mark.usefixtures("patient")


def _pick(page: Page, example: str) -> None:
    page.select_option("#example", example)
    expect(page.locator("#compile-result .stats")).to_contain_text("compiled")


def _run(page: Page, live_server: str, example: str, max_tokens: int) -> None:
    """Pick an example and run it to the end (space, the keys on the page) under a token cap."""
    page.goto(live_server)
    _pick(page, example)
    page.fill('input[name="max_tokens"]', str(max_tokens))
    page.locator("header.topbar").click()
    page.keyboard.press(" ")
    expect(page.locator("#status")).to_have_attribute("data-done", "true")


def _mask_drawn(page: Page) -> None:
    """The canvas holds the picture: its size is the vocabulary's, one lit cell per allowed id."""
    page.wait_for_function(
        "() => document.querySelector('#mask-canvas').width === 256", timeout=60_000
    )
    allowed = int(page.locator("#inspector .mask-legend b").first.inner_text().replace(",", ""))
    assert allowed > 0
    assert _lit_cells(page) == allowed


def _step_to_a_choice(page: Page) -> int:
    """Step until the inspected step has an allowed top-k token other than the one taken."""
    alternatives = page.locator("#inspector .topk tr.allowed:not(.chosen-row) button.force")
    for n in range(1, 30):
        page.keyboard.press("ArrowRight")
        expect(page.locator("#inspector")).to_have_attribute("data-index", str(n - 1))
        _mask_drawn(page)  # after every step, not only after a click
        if alternatives.count():
            return n - 1
    raise AssertionError("no step with a choice")


def test_1_the_mask_panel_draws_after_a_step_and_after_a_force(
    page: Page, live_server: str
) -> None:
    page.goto(live_server)
    _pick(page, "nested")
    at = _step_to_a_choice(page)
    page.locator("#inspector .topk tr.allowed:not(.chosen-row) button.force").first.click()
    expect(page.locator(f"#tok-{at}.forced")).to_have_count(1)
    _mask_drawn(page)
    page.keyboard.press("Backspace")
    expect(page.locator("#tokens .chip")).to_have_count(at)
    expect(page.locator("#inspector")).to_have_attribute("data-index", str(at - 1))
    _mask_drawn(page)
    shot(page, "page-1-mask-after-step")


def test_2_a_two_token_step_lists_both_tokens(page: Page, live_server: str) -> None:
    page.goto(live_server)
    page.click("text=Regex")
    page.locator("#editor .cm-content").click()
    page.keyboard.press("Control+a")
    page.keyboard.type("[ab]")
    expect(page.locator("#compile-result .stats")).to_contain_text("compiled")
    page.locator("header.topbar").click()
    page.keyboard.press("ArrowRight")
    expect(page.locator("#tokens .chip")).to_have_count(1)
    rows = page.locator("#inspector .allowed-list tbody tr")
    expect(rows).to_have_count(2)
    texts = sorted(t.split()[0] for t in rows.all_inner_texts())
    assert texts == ["a", "b"]
    masked = [float(r.locator("td").nth(1).inner_text().rstrip("%")) for r in rows.all()]
    assert abs(sum(masked) - 100) < 0.05  # renormalised over the allowed tokens
    expect(page.locator("#inspector .mass-caption")).to_contain_text("blocked")
    shot(page, "page-2-allowed-list")


def test_2_a_large_mask_is_summarised_by_what_it_blocks(page: Page, live_server: str) -> None:
    _run(page, live_server, "candidate", 10)  # into the summary string
    widest = page.evaluate(
        """() => [...document.querySelectorAll('#tokens .chip')]
                 .sort((a, b) => b.dataset.allowed - a.dataset.allowed)[0].dataset.index"""
    )
    page.click(f"#tok-{widest}")
    expect(page.locator("#inspector")).to_have_attribute("data-index", widest)
    summary = page.locator("#inspector .blocked-summary")
    expect(summary).to_contain_text("tokens containing a backslash")
    expect(page.locator("#inspector .allowed-list")).to_have_count(0)
    shot(page, "page-2-blocked-summary")


def test_3_keys_after_an_example_pick_queue_and_empty_source(page: Page, live_server: str) -> None:
    page.goto(live_server)  # opens on the first example (#26): empty the editor first
    page.evaluate("() => MS.setSource('')")
    page.keyboard.press(" ")
    expect(page.locator("#toast")).to_contain_text("Pick an example or write a schema")
    _pick(page, "nested")
    for _ in range(10):  # no waiting: presses queue while a step is in flight
        page.keyboard.press("ArrowRight")
    expect(page.locator("#tokens .chip")).to_have_count(10, timeout=60_000)
    page.keyboard.press(" ")
    expect(page.locator("#status")).to_have_attribute("data-done", "true", timeout=60_000)
    assert page.locator("#tokens .chip").count() > 10
    shot(page, "page-3-keys")


def test_3_space_right_after_an_example_pick_starts_a_run(page: Page, live_server: str) -> None:
    page.goto(live_server)  # on the first example, pricing
    expect(page.locator("#compile-result .stats")).to_contain_text("compiled")
    held: list[Route] = []
    page.route("**/api/examples/nested", lambda route: held.append(route))
    page.locator("#example").focus()  # as after a click on the picker
    page.select_option("#example", "nested")
    assert page.evaluate("() => document.activeElement === document.body")
    for _ in range(600):
        if held:
            break
        page.wait_for_timeout(50)
    page.keyboard.press(" ")  # before nested has loaded: the run waits for it
    page.wait_for_timeout(1000)  # time for a run on pricing to start, were the key not queued
    held[0].continue_()
    page.unroute("**/api/examples/nested")
    expect(page.locator("#status")).to_have_attribute("data-done", "true")
    expect(page.locator("#status")).to_contain_text("stopped: terminated")
    text = "".join(page.locator("#tokens .chip").all_text_contents())
    assert '"user"' in text and "churn" not in text, text[:120]


def test_3_arrows_on_replay_move_through_the_replayed_tokens(page: Page, live_server: str) -> None:
    page.goto(live_server)
    _pick(page, "nested")
    page.click("label.tab:has(input[value=replay])")
    page.click("#btn-replay")
    expect(page.locator("#replay-result .chip").first).to_be_visible()
    # A manual replay opens the refused token (C16), the last one replayed; arrows move from it.
    last = page.locator("#replay-result .chip").last.get_attribute("data-index")
    assert last is not None and int(last) > 1
    expect(page.locator("#inspector")).to_have_attribute("data-index", last)
    page.locator("header.topbar").click()
    page.keyboard.press("ArrowLeft")
    expect(page.locator("#inspector")).to_have_attribute("data-index", str(int(last) - 1))
    _mask_drawn(page)  # an accepted token's (the refused one's cell is drawn besides)
    page.keyboard.press("ArrowRight")
    expect(page.locator("#inspector")).to_have_attribute("data-index", last)
    expect(page.locator("#replay-result .chip.selected")).to_have_attribute("data-index", last)
    page.click("label.tab:has(input[value=generate])")
    expect(page.locator("#tokens .chip")).to_have_count(0)  # the hidden session was not stepped


def test_4_switching_example_mid_run_stops_it_and_marks_the_old_output(
    page: Page, live_server: str
) -> None:
    page.goto(live_server)
    _pick(page, "pricing")
    page.keyboard.press(" ")
    expect(page.locator("#tokens .chip").nth(4)).to_be_visible(timeout=60_000)
    count = page.locator("#status .count")
    expect(count).not_to_have_text("0 / 320 steps")  # the counter follows the stream
    # The run stopped: its stream closed (the runner emptied) and the server answered the pause.
    with page.expect_response(lambda r: r.url.endswith("/pause") and r.ok, timeout=60_000):
        _pick(page, "nested")
    stopped_at = page.locator("#tokens .chip").count()
    # No chip can come after: htmx's SSE extension swaps nothing into a runner out of the page.
    expect(page.locator("#runner")).to_be_empty()
    expect(page.locator("#runner")).not_to_have_attribute("data-running", "true")
    expect(page.locator("#session-area")).to_have_class("session-area stale")
    expect(page.locator("#session-area .stale-note")).to_contain_text("previous setup")
    expect(page.locator("#btn-run")).to_have_text("▶ Run")
    shot(page, "page-4-stale")
    assert page.locator("#tokens .chip").count() <= stopped_at + 1  # the step in flight at most
    assert page.locator("#status").get_attribute("data-done") == "false"  # no verdict for it
    page.keyboard.press(" ")  # a new session for the new schema
    expect(page.locator("#status")).to_have_attribute("data-done", "true", timeout=60_000)
    expect(page.locator("#session-area")).not_to_have_class("session-area stale")
    last = page.locator("#tokens .chip").count() - 1
    expect(page.locator("#inspector")).to_have_attribute("data-index", str(last))
    expect(page.locator("#status .count")).to_have_text(f"{last + 1} / 120 steps")


def test_4_a_force_asks_first_and_back_restores_what_it_discarded(
    page: Page, live_server: str
) -> None:
    dialogs: list[str] = []

    def accept(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.accept()

    page.on("dialog", accept)
    _run(page, live_server, "nested", 16)
    expect(page.locator("#tokens .chip")).to_have_count(16)
    before = page.locator("#tokens").inner_text()
    alternatives = page.locator("#inspector .topk tr.allowed:not(.chosen-row) button.force")
    for at in range(15):
        page.click(f"#tok-{at}")
        expect(page.locator("#inspector")).to_have_attribute("data-index", str(at))
        if alternatives.count():
            break
    else:
        raise AssertionError("no step with a choice")
    alternatives.first.click()
    expect(page.locator("#tokens .chip")).to_have_count(at + 1)
    assert dialogs and f"discards {15 - at} tokens after it" in dialogs[0]
    expect(page.locator("#discarded-note")).to_contain_text("Undo (Backspace) restores them")
    page.keyboard.press("Backspace")
    expect(page.locator("#tokens .chip")).to_have_count(16)
    assert page.locator("#tokens").inner_text() == before
    expect(page.locator("#tokens .chip.forced")).to_have_count(0)
    expect(page.locator("#discarded-note")).to_be_hidden()


def test_4_an_edited_option_makes_the_preset_custom(page: Page, live_server: str) -> None:
    page.goto(live_server)
    _pick(page, "nested")
    page.select_option("#preset", "vllm")
    expect(page.locator('input[name="any_whitespace"]')).to_be_checked()
    page.uncheck('input[name="strict_mode"]')
    expect(page.locator("#preset")).to_have_value("custom")
    expect(page.locator("#compile-result .opts")).to_contain_text("strict=false")
    expect(page.locator("#compile-result .opts")).to_contain_text("any_whitespace=true")


def test_5_forced_and_mask_changed_chips_look_different(page: Page, live_server: str) -> None:
    page.goto(live_server)
    _pick(page, "router")  # greedy: "f" where the model preferred "F" (blocked), among others
    page.keyboard.press(" ")
    expect(page.locator("#status")).to_have_attribute("data-done", "true")
    changed = page.locator("#tokens .chip.k-changed")
    forced = page.locator("#tokens .chip.k-forced")
    assert changed.count() >= 1 and forced.count() >= 1
    style = "(el) => getComputedStyle(el).backgroundColor + '|' + getComputedStyle(el).color"
    assert changed.first.evaluate(style) != forced.first.evaluate(style)
    assert "the mask changed the choice" in (changed.first.get_attribute("title") or "")
    page.check("#filter-changed")
    expect(page.locator("#tokens .chip:visible")).to_have_count(changed.count())
    shot(page, "page-5-chip-kinds")


def test_7_a_model_with_a_validator_compiles_with_a_notice(page: Page, live_server: str) -> None:
    from tests.sandbox.test_check import VALIDATED

    page.goto(live_server)
    page.click("text=Pydantic")
    page.evaluate("(text) => MS.setSource(text)", VALIDATED + "# " + "long line " * 40 + "\n")
    notice = page.locator("#compile-result .stripped-notice")
    expect(notice).to_contain_text("Answer.check_reason (@field_validator, @classmethod)")
    expect(notice).to_contain_text("the final validation of the output runs the model without them")
    expect(page.locator("#compile-result details.derived")).not_to_have_attribute("open", "")
    expect(page.locator("#compile-result .grammar-text")).to_be_visible()  # not pushed away
    editor = page.locator("#editor").bounding_box()
    assert editor and editor["height"] >= 300
    assert page.evaluate("getComputedStyle(document.querySelector('#editor')).resize") == "vertical"
    long_line = page.locator("#editor .cm-line").filter(has_text="long line").bounding_box()
    assert long_line and long_line["height"] > 30  # wrapped onto several rows, not scrolled away
    shot(page, "page-7-validator")


def test_7_copy_output_copies_the_text(page: Page, live_server: str) -> None:
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    _run(page, live_server, "nested", 6)
    page.click("#btn-copy-output")
    expect(page.locator("#btn-copy-output")).to_have_text("Copied")
    copied = page.evaluate("() => navigator.clipboard.readText()")
    assert copied == page.locator("#btn-copy-output").get_attribute("data-copied")
    assert copied.startswith('{"user": {')


def _replay_cause(page: Page, live_server: str, example: str, text: str) -> Locator:
    page.goto(live_server)
    _pick(page, example)
    page.click("label.tab:has(input[value=replay])")
    page.fill("#replay-text", text)
    page.click("#btn-replay")
    return page.locator("#replay-result .replay-cause")


def test_6_a_pretty_printed_replay_names_whitespace_as_the_cause(
    page: Page, live_server: str
) -> None:
    cause = _replay_cause(page, live_server, "nested", '{\n  "user": {"id": 42}\n}')
    expect(cause).to_contain_text("a newline at offset 1 is refused by the compile options")
    expect(cause).to_contain_text("any_whitespace=false")
    expect(cause).to_contain_text("accept this whitespace (any_whitespace=true)")
    expect(cause).to_contain_text("vLLM default")
    expect(page.locator("#replay-result mark")).to_have_text("↵")
    expect(page.locator("#replay-result mark")).to_be_in_viewport()
    shot(page, "page-6-replay-whitespace")


def test_6_an_enum_refusal_lists_the_values_and_marks_the_schema_line(
    page: Page, live_server: str
) -> None:
    text = '{"factors": [{"explanation": "x", "severity": "critical"'
    cause = _replay_cause(page, live_server, "risk", text)
    expect(cause).to_contain_text('must be one of "low" | "medium" | "high" (enum)')
    line = page.locator("#replay-result").get_attribute("data-schema-line")
    assert line and int(line) > 1
    # The replay's mark joins the Doctor's (since doctor-core, the Doctor may mark this
    # schema too): one warning marker per line marked, the replay's line among them.
    expect(page.locator("#doctor-result[data-marks]")).to_have_count(1)
    marks = json.loads(page.locator("#doctor-result").get_attribute("data-marks") or "[]")
    assert page.evaluate("() => maskscope.ui.replayDiagnostics.length") == 1
    warned = {m["line"] for m in marks if m["severity"] == "warning"} | {int(line)}
    expect(page.locator("#editor .cm-lint-marker-warning")).to_have_count(len(warned))
    shot(page, "page-6-replay-enum")
