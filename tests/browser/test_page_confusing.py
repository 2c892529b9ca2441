"""What confused a new user on the page after tools and logs (issue 45's C and M items): one
test per item done, on one server and one page for the module."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Dialog, expect

from tests.browser.conftest import shot
from tests.browser.shared_page import (
    PATTERN_AND_LENGTH,
    SMALL,
    WIDE,
    Shared,
    compiled,
    inspecting,
    pick_vllm_builder,
    raised_nothing,
    shared_page,
    steps,
)

pytestmark = pytest.mark.usefixtures("patient")


@pytest.fixture(scope="module")
def shared(browser: Browser) -> Iterator[Shared]:
    for one in shared_page(browser):
        yield one
        raised_nothing(one)


def test_c4_a_builder_switch_keeps_the_format_s_counterpart(
    shared: Shared, live_server: str
) -> None:
    page = shared.example(live_server, "router_tools")
    expect(page.locator("#tools-format")).to_have_value("qwen_3")
    pick_vllm_builder(page)
    expect(page.locator("#tools-format")).to_have_value("hermes")
    expect(page.locator("#tools-note")).to_contain_text("qwen_3 is hermes under vllm")
    assert '"format": "hermes"' in page.evaluate("() => MS.source()")
    page.select_option("#tools-builder", "xgrammar")
    expect(page.locator("#tools-format")).to_have_value("qwen_3")


def test_c5_the_force_question_and_its_note_give_one_count_and_the_undo_key(
    shared: Shared, live_server: str
) -> None:
    page = shared.example(live_server, "pricing")
    inspecting(page, 6, 2)
    chosen = page.locator("#inspector").get_attribute("data-token")
    other = page.locator(
        f'#inspector button.force[data-allowed="true"]:not([data-token-id="{chosen}"])'
    ).first
    asked: list[str] = []

    def answer(dialog: Dialog) -> None:
        asked.append(dialog.message)
        dialog.accept()

    page.once("dialog", answer)
    other.click()
    expect(page.locator("#tokens .chip")).to_have_count(3)
    assert asked and "Undo (Backspace)" in asked[0], asked
    counted = re.search(r"discards (\d+) tokens? after it", asked[0])
    assert counted, asked
    expect(page.locator("#discarded-note")).to_contain_text(f"{counted.group(1)} tokens after it")


def test_c6_m3_a_test_clicked_restores_the_maximised_panel(
    shared: Shared, live_server: str
) -> None:
    page = shared.example(live_server, "pricing")
    page.click('.compile-panel .tab-button[data-view="tests"]')
    page.fill("#test-text", '{"churn_analysis": 7}')
    page.click("#btn-add-test")
    expect(page.locator("#tests-result .test-row")).to_have_count(1)
    page.click("#btn-dock-max")
    expect(page.locator("#layout")).to_have_class(re.compile(r"\bdock-max\b"))
    # the validator's own message is in the row (M3)
    message = page.locator("#tests-result .test-row .schema-verdict .schema-error")
    expect(message).to_contain_text(re.compile(r"is not of type|is a required property"))
    page.locator("#tests-result .test-row").first.click()
    expect(page.locator("#layout")).not_to_have_class(re.compile(r"\bdock-max\b"))
    expect(page.locator("#replay-result .badge.bad")).to_be_visible()
    page.click('label.tab:has(input[value="generate"])')


def test_c9_the_inspector_greys_with_the_stale_output(shared: Shared, live_server: str) -> None:
    page = shared.example(live_server, "pricing")
    steps(page, 2)
    expect(page.locator("#inspector[data-session]")).to_have_count(1)
    page.click('input[name="strict_mode"]')  # a change of setup
    expect(page.locator("#session-area")).to_have_class(re.compile(r"\bstale\b"))
    expect(page.locator("#inspector")).to_have_class(re.compile(r"\bstale\b"))
    shot(page, "c9-stale-inspector-1440x900")


def test_c10_generate_is_disabled_on_a_tokenizer_only_model(
    shared: Shared, live_server: str
) -> None:
    page = shared.example(live_server, "pricing")
    expect(page.locator("#btn-run")).to_be_enabled()
    page.select_option("#model", "deepseek-v4")
    for button in ("#btn-step", "#btn-run"):
        expect(page.locator(button)).to_be_disabled()
        expect(page.locator(button)).to_have_attribute("title", re.compile("tokenizer-only"))
    page.select_option("#model", "local")
    expect(page.locator("#btn-run")).to_be_enabled()
    expect(page.locator("#btn-run")).to_have_attribute("title", re.compile("run until done"))


def test_m6_run_is_disabled_on_a_source_that_does_not_compile(
    shared: Shared, live_server: str
) -> None:
    page = shared.example(live_server, "pricing", SMALL)
    page.evaluate('() => MS.setSource(\'{"type": "object",\\n  "properties": }\')')
    # the dock is folded at this height: the error is in the panel, and the buttons name it
    expect(page.locator('#compile-result[data-error-line="2"]')).to_have_count(1)
    for button in ("#btn-step", "#btn-run"):
        expect(page.locator(button)).to_be_disabled()
        expect(page.locator(button)).to_have_attribute(
            "title", re.compile(r"does not compile \(line 2\)")
        )
    shot(page, "m6-run-disabled-1280x720")
    page.set_viewport_size(WIDE)


def test_m4_a_paused_run_says_paused(shared: Shared, live_server: str) -> None:
    page = shared.example(live_server, "pricing")
    page.click("#btn-run")
    expect(page.locator("#tokens .chip").nth(3)).to_be_visible()
    page.click("#btn-run")  # ❚❚ Pause
    expect(page.locator("#status .paused")).to_have_text("paused")
    expect(page.locator("#status")).to_have_attribute("data-done", "false")
    expect(page.locator("#btn-run")).to_have_text("▶ Run")


def test_c14_the_inspector_names_the_segment_and_the_tool(shared: Shared, live_server: str) -> None:
    page = shared.example(live_server, "router_tools")
    page.evaluate("() => window.maskscope.step(24)")
    expect(page.locator("#tokens .chip")).to_have_count(24)
    page.locator("#tok-23").click()
    expect(page.locator("#inspector")).to_have_attribute("data-index", "23")
    row = page.locator("#inspector .segment-row")
    expect(row).to_contain_text(
        re.compile(r"(tag begin|tool name|arguments|tag end) · (fetch_user_features|respond)")
    )
    shot(page, "c14-segment-row-1440x900")


def test_c11_an_impossible_reasoning_setting_is_flagged_beside_its_select(
    shared: Shared, live_server: str
) -> None:
    page = shared.example(live_server, "router_tools")
    page.select_option("#reasoning", "mask_after_end")
    flag = page.locator("#reasoning-flag")
    expect(flag).to_contain_text("no reasoning end marker")
    page.select_option("#reasoning", "none")
    expect(flag).to_have_text("")
    page = shared.example(live_server, "reasoning_tools")
    page.select_option("#reasoning", "mask_after_end")
    compiled(page)
    expect(flag).to_have_text("")


def test_c7_a_text_the_grammar_accepts_and_the_schema_rejects_says_so(
    shared: Shared, live_server: str
) -> None:
    page = shared.example(live_server, "pricing")
    page.evaluate("(text) => MS.setSource(text)", PATTERN_AND_LENGTH)
    compiled(page)
    page.click('label.tab:has(input[value="replay"])')
    page.fill("#replay-text", '{"id": "ABC-1234567890", "status": "x"}')  # past maxLength 8
    page.click("#btn-replay")
    expect(page.locator("#replay-result .badge.ok")).to_have_text("accepted and complete")
    said = page.locator("#replay-result .replay-disagree")
    expect(said).to_contain_text("grammar accepts, schema rejects:")
    expect(said).to_contain_text("is too long")
    page.click('label.tab:has(input[value="generate"])')
