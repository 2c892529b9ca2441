"""The Tools tab in a real browser: an example opens on it, its controls are fed by
/api/tool-formats and rewrite the source, the compile panel says what the tag leaves
unconstrained above the tag, and the tag opens as a structural_tag source."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import shot

pytestmark = pytest.mark.usefixtures("patient")

#: A template that renders each tool's ``strict`` flag (vLLM #52741).
STRICT = (
    Path(__file__).resolve().parents[1] / "fixtures" / "templates" / "strict.jinja"
).read_text()


def source(page: Page) -> str:
    text: str = page.evaluate("() => window.MS.source()")
    return text


def test_the_tools_tab_shows_the_tag_and_what_it_leaves_free(page: Page, live_server: str) -> None:
    page.goto(f"{live_server}/?example=router_tools")
    expect(page.locator('input[name="kind"][value="tools"]')).to_be_checked()
    expect(page.locator("#tools-controls")).to_be_visible()
    compiled = page.locator("#compile-result")
    expect(compiled.locator(".stats")).to_contain_text("compiled")
    expect(compiled.locator("#unconstrained li")).to_have_text(
        ["nothing: every part of the output is constrained"]
    )
    expect(compiled.locator(".builder-versions")).to_contain_text("xgrammar 0.2.9")
    expect(compiled.locator("#tag-text")).to_contain_text("fetch_user_features")
    # The format picker lists xgrammar's formats, read from the server
    expect(page.locator("#tools-format")).to_have_value("qwen_3")
    expect(page.locator('#tools-format option[value="llama"]')).to_have_count(1)
    expect(page.locator("#tools-choice")).to_have_value("required")
    shot(page, "tools-tab")

    page.select_option("#tools-choice", "auto")
    expect(compiled.locator("#unconstrained")).to_contain_text("free text before the call")
    assert '"tool_choice": "auto"' in source(page)
    page.select_option("#tools-choice", "function:respond")
    expect(compiled.locator("#tag-text")).not_to_contain_text("fetch_user_features")
    assert '"name": "respond"' in source(page)

    page.click("#btn-open-tag")
    expect(page.locator('input[name="kind"][value="structural_tag"]')).to_be_checked()
    expect(page.locator("#tools-controls")).to_be_hidden()
    expect(compiled.locator(".stats")).to_contain_text("compiled")
    expect(compiled.locator("#tools-compile")).to_have_count(0)
    assert '"type": "structural_tag"' in source(page) and "respond" in source(page)


def test_a_tools_session_steps_from_the_page(page: Page, live_server: str) -> None:
    page.goto(f"{live_server}/?example=router_tools")
    expect(page.locator("#compile-result .stats")).to_contain_text("compiled")
    page.click("#btn-step")
    expect(page.locator("#tokens .chip")).to_have_count(1)
    expect(page.locator("#tokens .chip").first).to_contain_text("<")


def test_the_stack_reasoning_holds_the_mask_off_until_the_reasoning_ends(
    page: Page, live_server: str
) -> None:
    page.goto(f"{live_server}/?example=reasoning_tools")
    expect(page.locator("#compile-result .stats")).to_contain_text("compiled")
    expect(page.locator("#reasoning")).to_be_visible()
    expect(page.locator("#reasoning")).to_have_value("none")
    page.select_option("#reasoning", "mask_after_end")
    expect(page.locator("#compile-result .stats")).to_contain_text("compiled")
    for _ in range(3):
        page.click("#btn-step")
    chips = page.locator("#tokens .chip")
    expect(chips).to_have_count(3)
    # The reasoning is open: no mask applied to these steps, and the chips say so
    expect(page.locator("#tokens .chip.unmasked")).to_have_count(3)
    assert chips.first.get_attribute("data-masked") == "false"
    page.click('label.tab:has(input[value="json_schema"])')
    expect(page.locator("#reasoning")).to_be_hidden()


def test_the_compile_panel_counts_the_tools_prompt_with_and_without_each_option(
    page: Page, live_server: str
) -> None:
    page.goto(f"{live_server}/?example=router_tools")
    compiled = page.locator("#compile-result")
    expect(compiled.locator(".stats")).to_contain_text("compiled")
    # the model's own template renders the prompt: its count is shown, and each option's
    expect(compiled.locator("#tools-prompt-options tr[data-option]")).to_have_count(3)
    tools = json.loads(source(page))
    page.evaluate("(text) => MS.setSource(text)", json.dumps({**tools, "chat_template": STRICT}))
    strict = compiled.locator('#tools-prompt-options tr[data-option="strict"]')
    expect(strict).to_have_class(re.compile(r"\bchanges\b"))
    with_, without = (int(strict.get_attribute(a) or "0") for a in ("data-with", "data-without"))
    assert with_ > without
    expect(strict.locator("td").nth(1)).to_have_text(str(with_))
    expect(strict.locator("td").nth(2)).to_have_text(str(without))
    expect(strict.locator(".badge")).to_have_text(f"+{with_ - without} tokens")
    expect(compiled.locator('#tools-prompt-options tr[data-option="reasoning"]')).to_have_class(
        re.compile(r"\bsame\b")  # the pasted template reads no enable_thinking
    )
    shown = compiled.locator("#tools-prompt").get_attribute("data-tokens")
    expect(compiled.locator("#tools-prompt-tokens")).to_have_text(str(shown))
    compiled.locator("#tools-prompt summary").click()
    prompt = compiled.locator("#tools-prompt pre")
    expect(prompt).to_contain_text("<|im_start|>user")  # the pasted template's render
    expect(prompt).to_contain_text(page.locator('textarea[name="user"]').input_value())
    shot(page, "tools-prompt-counts")
