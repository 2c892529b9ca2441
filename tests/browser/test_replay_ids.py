"""The Replay tab's ids and log-line boxes in a real browser: a pasted vLLM line is replayed after
the text, its first refused id explained, and a chip opens the inspector on those ids."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from app.engine import Engine
from tests.browser.conftest import shot

pytestmark = pytest.mark.usefixtures("patient")


def test_a_pasted_log_line_replays_after_the_text(
    page: Page, live_server: str, engine: Engine
) -> None:
    tokens = engine.model.tokens
    ids = tokens.encode('"user": [')  # the nested example's user is an object: "[" is refused
    line = (
        "(EngineCore pid=77) ERROR 12-01 10:00:00 [scheduler.py:2190] Unexpected: grammar "
        f"rejected tokens {ids} for request chatcmpl-5. Terminating request."
    )
    page.goto(f"{live_server}/?example=nested")
    expect(page.locator("#compile-result .stats")).to_contain_text("compiled")
    page.click("label.tab:has(input[value=replay])")
    page.fill("#replay-text", "{")
    page.fill("#replay-log", line)
    page.click("#btn-replay")
    refusal = page.locator("#refusal")
    expect(refusal).to_contain_text(f"First refused id {ids[-1]}")
    expect(refusal).to_contain_text(f"token #{len(tokens.encode('{')) + len(ids) - 1}")
    expect(page.locator("#replay-result .chip")).to_have_count(len(tokens.encode("{")) + len(ids))
    expect(page.locator("#replay-result mark")).to_have_text("[")
    # the inspector walks the same inputs: the text, then the log line's ids
    page.locator("#replay-result .chip").last.click()
    expect(page.locator("#inspector")).to_contain_text(f"{ids[-1]}")
    shot(page, "replay-log-line")


def test_an_unreadable_log_line_says_which_messages_are_read(page: Page, live_server: str) -> None:
    page.goto(f"{live_server}/?example=nested")
    expect(page.locator("#compile-result .stats")).to_contain_text("compiled")
    page.click("label.tab:has(input[value=replay])")
    page.fill("#replay-log", "INFO 12-01 10:00:00 [api_server.py:1] all is well")
    page.click("#btn-replay")
    expect(page.locator("body")).to_contain_text("Failed to advance FSM for request")
