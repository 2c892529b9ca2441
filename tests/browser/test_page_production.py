"""The production workflow on the page (issue 45, C1/C2, M1, C12): a log line's replay says its
cause and one setting to try, the end-marker advice names the fix of the builder in use, the
serve flags have pickers whose values come from vLLM's own registries, and the options a tag does
not carry are disabled. One server and one page for the module; screenshots of the views at
1440x900 and 1280x720 go to test-artifacts/."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import shot
from tests.browser.shared_page import (
    SMALL,
    WIDE,
    Shared,
    compiled,
    pick_vllm_builder,
    raised_nothing,
    shared_page,
    steps,
)

# the c1 screen's log line: Qwen3.6's "\n", "</think>", "\n\n", which vLLM's engine rejected
LOG_LINE = (
    "(EngineCore_DP0 pid=412) ERROR 07-02 14:11:09 [scheduler.py:1611] Unexpected: grammar "
    "rejected tokens [198, 248069, 271] for request chatcmpl-7f3. Terminating request."
)

pytestmark = pytest.mark.usefixtures("patient")


@pytest.fixture(scope="module")
def shared(browser: Browser) -> Iterator[Shared]:
    for one in shared_page(browser):
        yield one
        raised_nothing(one)


def _source(page: Page) -> str:
    text: str = page.evaluate("() => MS.source()")
    return text


def _vllm_tools(shared: Shared, server: str) -> Page:
    """The router tools example under vLLM's builder, compiled."""
    page = shared.example(server, "router_tools")
    pick_vllm_builder(page)
    expect(page.locator("#compile-result .stats")).to_contain_text("compiled", timeout=180_000)
    expect(page.locator("#compile-result")).to_contain_text("vllm")
    return page


def _qwen(page: Page) -> None:
    """Qwen3.6's tokenizer picked, and loaded (its first use starts its load)."""
    page.select_option("#model", "qwen3.6")
    page.wait_for_function(
        "async () => (await (await fetch('/api/models')).json())"
        ".some((m) => m.id === 'qwen3.6' && m.ready)",
        polling=1000,
        timeout=180_000,
    )
    expect(page.locator('#model option[value="qwen3.6"]')).to_have_attribute(
        "data-ready", "true", timeout=180_000
    )
    expect(page.locator("#compile-result .stats")).to_contain_text("compiled", timeout=180_000)


@pytest.mark.timeout(900)  # vLLM's first build on Qwen3.6's tokenizer: minutes on a shared CPU
def test_c1_a_log_line_replay_says_its_cause_and_one_setting_to_try(
    shared: Shared, live_server: str
) -> None:
    page = _vllm_tools(shared, live_server)
    _qwen(page)
    page.click('label.tab:has(input[value="replay"])')
    page.fill("#replay-text", "")
    page.fill("#replay-ids", "")
    page.fill("#replay-log", LOG_LINE)
    page.click("#btn-replay")
    # the first vLLM build on Qwen3.6's tokenizer takes a while on a shared CPU
    expect(page.locator("#replay-result .badge.bad")).to_have_text("refused", timeout=240_000)
    cause = page.locator("#replay-result .replay-cause")
    expect(cause).to_contain_text("Cause.")
    expect(cause).to_contain_text("is refused before any of the tag's markers")
    setting = page.locator("#replay-result .replay-setting")
    # the model was reasoning: </think> comes next, which vLLM's qwen3 reasoning parser ends
    # at (its registry, on this tokenizer), and no --reasoning-parser was set
    expect(setting).to_contain_text("set reasoning_parser to qwen3")
    expect(setting).to_contain_text("--reasoning-parser")
    for viewport, name in ((WIDE, "1440x900"), (SMALL, "1280x720")):
        page.set_viewport_size(viewport)
        setting.scroll_into_view_if_needed()
        shot(page, f"c1-log-line-cause-and-setting-{name}")
    page.set_viewport_size(WIDE)
    page.click("#btn-apply-setting")
    page.click('label.tab:has(input[value="generate"])')
    expect(page.locator("#tools-reasoning-parser")).to_have_value("qwen3")
    assert '"reasoning_parser": "qwen3"' in _source(page)
    expect(page.locator("#reasoning")).to_have_value("mask_after_end")
    expect(page.locator("#compile-result .builder-versions")).to_contain_text(
        "reasoning ends at </think>", timeout=180_000
    )


def test_c2_the_end_marker_advice_names_the_builder_s_own_fix(
    shared: Shared, live_server: str
) -> None:
    page = _vllm_tools(shared, live_server)
    page.select_option("#reasoning", "mask_after_end")
    flag = page.locator("#reasoning-flag")
    expect(flag).to_contain_text("reasoning_parser")
    expect(flag).to_contain_text("--reasoning-parser")
    expect(flag).not_to_contain_text("builder's reasoning")
    # the server's answer says the same: a step is refused with the vLLM builder's fix
    page.click("#btn-step")
    toast = page.locator("#toast")
    expect(toast).to_contain_text("needs an end marker")
    expect(toast).to_contain_text("--reasoning-parser")
    shot(page, "c2-end-marker-advice-1440x900")
    page.select_option("#tools-builder", "xgrammar")
    compiled(page)
    expect(flag).to_contain_text("set the builder's reasoning to enabled")
    page.select_option("#reasoning", "none")


def test_m1_the_serve_flag_pickers_come_from_the_server_and_reach_the_permalink(
    shared: Shared, live_server: str
) -> None:
    page = _vllm_tools(shared, live_server)
    answer = page.evaluate("async () => (await fetch('/api/serve-flags')).json()")
    assert answer["available"], answer
    values = {f["field"]: [str(v).lower() for v in f["values"]] for f in answer["fields"]}
    for picker, field in (
        ("#tools-reasoning-parser", "reasoning_parser"),
        ("#tools-strict-level", "strict_level"),
        ("#tools-strict-calling", "strict_tool_calling"),
    ):
        listed = page.locator(f"{picker} option").evaluate_all("(os) => os.map((o) => o.value)")
        assert listed == ["", *values[field]], (picker, listed)
    assert "qwen3" in values["reasoning_parser"]
    page.select_option("#tools-reasoning-parser", "qwen3")
    page.select_option("#tools-strict-level", "function")
    page.select_option("#tools-strict-calling", "true")
    page.locator('#tools-strict input[data-tool="fetch_user_features"]').check()
    source = _source(page)
    for written in ('"reasoning_parser": "qwen3"', '"strict_level": "function"',
                    '"strict_tool_calling": true', '"strict": true'):  # fmt: skip
        assert written in source, (written, source)
    # the compile carries them: the reasoning parser's end marker is the tag's
    expect(page.locator("#compile-result .builder-versions")).to_contain_text(
        "reasoning ends at", timeout=180_000
    )
    shot(page, "m1-serve-flag-pickers-1440x900")
    page.set_viewport_size(SMALL)
    shot(page, "m1-serve-flag-pickers-1280x720")
    page.set_viewport_size(WIDE)
    steps(page, 1)  # a permalink holds a session
    page.click("#btn-share")
    link = page.locator("#share-result .share-link")
    expect(link).to_have_count(1)
    page.goto(link.get_attribute("data-url") or "")
    compiled(page)
    expect(page.locator("#tools-reasoning-parser")).to_have_value("qwen3")
    expect(page.locator("#tools-strict-level")).to_have_value("function")
    expect(page.locator("#tools-strict-calling")).to_have_value("true")
    expect(page.locator('#tools-strict input[data-tool="fetch_user_features"]')).to_be_checked()
    # xgrammar's builder takes none of vLLM's serve flags: disabled, saying why
    page.select_option("#tools-builder", "xgrammar")
    expect(page.locator("#tools-reasoning-parser")).to_be_disabled()
    expect(page.locator('label[data-field="reasoning_parser"]')).to_have_attribute(
        "title", re.compile("xgrammar builder has no parameter")
    )


def test_c12_options_a_tag_does_not_carry_are_disabled(shared: Shared, live_server: str) -> None:
    for viewport, name in ((WIDE, "1440x900"), (SMALL, "1280x720")):
        page = shared.example(live_server, "router_tools", viewport)
        expect(page.locator("#compile-result .builder-versions")).to_contain_text("not carried")
        for name_ in ("preset", "any_whitespace", "strict_mode", "indent"):
            expect(page.locator(f'#config [name="{name_}"]')).to_be_disabled()
        label = page.locator('label:has(> input[name="any_whitespace"])')
        expect(label).to_have_attribute("title", re.compile("not carried"))
        shot(page, f"c12-not-carried-disabled-{name}")
        # a JSON Schema takes them all again
        page.select_option("#example", "pricing")
        compiled(page)
        for selector in ("#preset", '#config input[name="any_whitespace"]'):
            expect(page.locator(selector)).to_be_enabled()
        expect(label).not_to_have_attribute("title", re.compile("not carried"))
