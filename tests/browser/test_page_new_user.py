"""What a new user met on the page after tools and logs (issue 45): one test per broken
behaviour B1-B9, on one server and one page for the module. Screenshots of the fixed views at
1440x900 and 1280x720 go to test-artifacts/."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import shot
from tests.browser.shared_page import (
    PATTERN_AND_LENGTH,
    SMALL,
    WIDE,
    Shared,
    compiled,
    in_view,
    inspecting,
    pick_vllm_builder,
    raised_nothing,
    shared_page,
    steps,
)

LOG_LINE = (
    "(EngineCore pid=1) ERROR 12-03 12:00:00 [scheduler.py:1] Unexpected: grammar rejected"
    " tokens [90, 91] for request cmpl-1. Terminating request."
)


@pytest.fixture(scope="module")
def shared(browser: Browser) -> Iterator[Shared]:
    for one in shared_page(browser):
        yield one
        raised_nothing(one)


pytestmark = pytest.mark.usefixtures("patient")


def _code_panel(page: Page, target: str) -> str:
    page.click("#btn-code")
    panel = page.locator(f'#code-dialog .code-panel[data-target="{target}"]')
    expect(panel).to_have_count(1)
    return panel.inner_text()


def _close_code(page: Page) -> None:
    page.keyboard.press("Escape")
    expect(page.locator("#code-dialog")).to_be_hidden()


def test_b1_a_json_example_runs_after_the_stack_reasoning_of_tools(
    shared: Shared, live_server: str
) -> None:
    page = shared.example(live_server, "reasoning_tools")
    page.select_option("#reasoning", "mask_after_end")
    compiled(page)
    page.select_option("#example", "pricing")
    expect(page.locator('input[name="kind"][value="json_schema"]')).to_be_checked()
    expect(page.locator("#reasoning")).to_be_hidden()
    compiled(page)
    steps(page, 1)
    expect(page.locator("#toast")).not_to_contain_text("end marker")
    # back on a tag kind, the setting the user chose is still there
    page.click('label.tab:has(input[value="tools"])')
    expect(page.locator("#reasoning")).to_have_value("mask_after_end")


def test_b2_code_of_a_tools_source_on_a_tokenizer_only_model_is_the_request(
    shared: Shared, live_server: str
) -> None:
    page = shared.example(live_server, "router_tools")
    page.select_option("#model", "qwen3.6")
    expect(page.locator('#model option[value="qwen3.6"]')).to_have_attribute(
        "data-ready", "true", timeout=180_000
    )
    compiled(page)
    code = _code_panel(page, "vllm")
    assert "no chat template" not in code, code
    # the request itself: the messages (the server's template renders them) and the tag
    assert "chat.completions.create" in code and "messages=MESSAGES" in code, code
    assert "fetch_user_features" in code, code
    shot(page, "b2-code-tokenizer-only-1440x900")
    _close_code(page)
    page.select_option("#model", "local")
    compiled(page)


def test_b3_replay_names_the_pattern_that_refused(shared: Shared, live_server: str) -> None:
    page = shared.example(live_server, "pricing")
    page.evaluate("(text) => MS.setSource(text)", PATTERN_AND_LENGTH)
    compiled(page)
    page.click('label.tab:has(input[value="replay"])')
    page.fill("#replay-text", '{"id": "abc", "status": "x"}')
    page.click("#btn-replay")
    cause = page.locator("#replay-result .replay-cause")
    expect(cause).to_contain_text("pattern")
    expect(cause).not_to_contain_text("maxLength")
    shot(page, "b3-replay-pattern-1440x900")
    page.click('label.tab:has(input[value="generate"])')


def test_b4_a_replay_never_sits_beside_an_old_generate_step(
    shared: Shared, live_server: str
) -> None:
    page = shared.example(live_server, "pricing")
    steps(page, 2)
    expect(page.locator("#inspector[data-session]")).to_have_count(1)
    page.click('label.tab:has(input[value="replay"])')
    page.fill("#replay-text", '{"churn_analysis": 7}')
    page.click("#btn-replay")
    expect(page.locator("#replay-result .badge.bad")).to_have_text("refused")
    expect(page.locator("#inspector[data-session]")).to_have_count(0)
    # the refused token is opened, as a test's click opens it (C16)
    refused = page.locator("#replay-result .chip.refused").first.get_attribute("data-index")
    expect(page.locator("#inspector[data-replay]")).to_have_attribute("data-index", str(refused))
    # a log line's replay, pasted while the generate step was shown again, the same
    page.click('label.tab:has(input[value="generate"])')
    page.locator("#tokens .chip").first.click()
    expect(page.locator("#inspector[data-session]")).to_have_count(1)
    page.click('label.tab:has(input[value="replay"])')
    page.fill("#replay-log", LOG_LINE)
    page.click("#btn-replay")
    expect(page.locator("#replay-result .badge.bad")).to_have_text("refused")
    expect(page.locator("#inspector[data-session]")).to_have_count(0)
    page.fill("#replay-log", "")
    page.click('label.tab:has(input[value="generate"])')


def test_b5_forcing_a_blocked_token_keeps_the_selected_step(
    shared: Shared, live_server: str
) -> None:
    page = shared.example(live_server, "pricing")
    inspecting(page, 6, 2)
    blocked = page.locator('#inspector button.force[data-allowed="false"]').first
    blocked.click()
    expect(page.locator("#toast")).to_contain_text("blocks token")
    expect(page.locator("#tokens .chip")).to_have_count(6)
    expect(page.locator("#tokens .chip.selected")).to_have_count(1)
    expect(page.locator("#tok-2")).to_have_class(re.compile(r"\bselected\b"))
    expect(page.locator("#inspector")).to_have_attribute("data-index", "2")


def test_b6_more_options_and_the_model_picker_fit_both_sizes(
    shared: Shared, live_server: str
) -> None:
    for viewport, name in ((WIDE, "1440x900"), (SMALL, "1280x720")):
        page = shared.example(live_server, "pricing", viewport)
        in_view(page, "#model")
        in_view(page, "#more-options > summary")
        page.click("#more-options > summary")
        for field in ("indent", "sep_item", "sep_key", "max_whitespace_cnt"):
            in_view(page, f'#more-options input[name="{field}"]')
        shot(page, f"b6-more-options-{name}")
        page.click("#more-options > summary")
    page.set_viewport_size(WIDE)


def test_b7_code_never_advises_a_stack_the_doctor_says_refuses(
    shared: Shared, live_server: str
) -> None:
    page = shared.example(live_server, "pricing")
    page.evaluate("(text) => MS.setSource(text)", PATTERN_AND_LENGTH)
    compiled(page)
    page.click('.compile-panel .tab-button[data-view="doctor"]')
    sglang_row = page.locator('#doctor-result .backend[data-backend="sglang"]')
    expect(sglang_row).to_have_attribute("data-verdict", "refuses")
    for target in ("sglang", "sglang_openai", "curl_sglang"):
        code = _code_panel(page, target)
        assert "launch_server" not in code, (target, code)
        assert "HTTP 400" in code and "cannot be enforced together" in code, (target, code)
        _close_code(page)
    vllm = _code_panel(page, "vllm")
    assert "SGLang" not in vllm.split("from openai")[0], vllm
    shot(page, "b7-code-refused-1440x900")
    _close_code(page)
    page.click('.compile-panel .tab-button[data-view="compile"]')


def test_b8_the_vllm_tools_snippet_prints_the_tool_calls(shared: Shared, live_server: str) -> None:
    page = shared.example(live_server, "router_tools")
    pick_vllm_builder(page)
    expect(page.locator("#compile-result .stats")).to_contain_text("compiled", timeout=180_000)
    code = _code_panel(page, "vllm")
    assert "message.tool_calls" in code, code
    assert "print(completion.choices[0].message.content)" not in code, code
    assert "TAG =" not in code, code
    _close_code(page)


def test_b9_the_timeline_stays_in_view_after_a_run(shared: Shared, live_server: str) -> None:
    for viewport, example, name in (
        (SMALL, "pricing", "1280x720"),
        (WIDE, "router_tools", "1440x900"),
    ):
        page = shared.example(live_server, example, viewport)
        page.fill('input[name="max_tokens"]', "60")
        page.click("#btn-run")
        expect(page.locator("#status")).to_have_attribute("data-done", "true", timeout=180_000)
        expect(page.locator("#tokens .chip").first).to_be_visible()
        in_view(page, "#timeline")
        in_view(page, "#btn-run")
        shot(page, f"b9-after-run-{name}")
    page.set_viewport_size(WIDE)
