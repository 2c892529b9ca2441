"""Breakpoints on the page: set one in the setup, run, see the pause and the condition that held,
continue, and reopen the permalink with the breakpoint in place."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import shot

pytestmark = pytest.mark.usefixtures("patient")

BREAK = "path=$.user.profile*"


def _nested(page: Page, live_server: str, *, max_tokens: int) -> None:
    """The page on the nested example, compiled, with a token cap."""
    page.goto(f"{live_server}/?example=nested")
    expect(page.locator("#compile-result .stats")).to_contain_text("compiled")
    page.fill('input[name="max_tokens"]', str(max_tokens))


def test_a_path_breakpoint_pauses_the_run_and_continue_goes_on(
    page: Page, live_server: str
) -> None:
    _nested(page, live_server, max_tokens=60)
    page.fill("#breakpoints", BREAK)
    page.click("#btn-run")
    note = page.locator("#break-note")
    expect(note).to_be_visible(timeout=120_000)
    index = int(note.get_attribute("data-index") or "-1")
    expect(page.locator("#break-text")).to_have_text(f"Stopped at #{index}: path $.user.profile*")
    expect(page.locator("#btn-run")).to_have_text("▶ Run")
    chips = page.locator("#tokens .chip")
    expect(chips).to_have_count(index + 1)
    expect(page.locator("#inspector")).to_have_attribute("data-index", str(index))
    # the step it stopped at is the first one inside $.user.profile, found from the chips' steps
    paths = page.evaluate(
        "async (id) => (await (await fetch(`/api/sessions/${id}`)).json()).steps.map(s => s.path)",
        page.evaluate("() => MS.ui.sessionId"),
    )
    inside = [i for i, p in enumerate(paths) if p.startswith("$.user.profile")]
    assert inside and inside[0] == index
    shot(page, "breakpoint-paused")
    page.click("#btn-continue")
    expect(note).to_be_hidden()
    expect(page.locator("#status")).to_have_attribute("data-done", "true", timeout=120_000)
    assert chips.count() > index + 1
    page.click("#btn-share")
    expect(page.locator("#share-result .share-link")).to_have_count(1)
    page.goto(page.locator("#share-result .share-link").get_attribute("data-url") or "")
    expect(page.locator("#breakpoints")).to_have_value(BREAK)  # the permalink kept it


def _steps(page: Page) -> list[dict[str, object]]:
    steps: list[dict[str, object]] = page.evaluate(
        "async (id) => (await (await fetch(`/api/sessions/${id}`)).json()).steps",
        page.evaluate("() => MS.ui.sessionId"),
    )
    return steps


def test_the_shadow_and_the_per_path_table_beside_the_output(page: Page, live_server: str) -> None:
    _nested(page, live_server, max_tokens=20)
    page.click("#btn-run")
    expect(page.locator("#status")).to_have_attribute("data-done", "true", timeout=120_000)
    steps = _steps(page)
    page.click("#tok-0")
    page.click("#btn-shadow")
    result = page.locator("#shadow-result")
    expect(result.locator("p")).to_be_visible(timeout=120_000)
    parts = next(
        (s["index"] for s in steps if s["token_id"] != s["top"][0]["token_id"]),  # type: ignore[index]
        None,
    )
    assert result.get_attribute("data-parts-at") == ("" if parts is None else str(parts))
    page.click("#btn-by-path")
    rows = page.locator("#by-path tr.row")
    expect(rows.first).to_be_visible()
    page.click("#by-path th[data-key=tokens]")  # the most tokens first
    first = rows.first
    spent = int(first.locator("td").nth(1).inner_text())
    assert spent == max(sum(s["path"] == p for s in steps) for p in {s["path"] for s in steps})
    first.click()
    expect(page.locator("#tokens .chip.path-hit")).to_have_count(spent)
    shot(page, "shadow-and-per-path")


def test_the_timeline_marks_every_step_an_alarm_held_at(page: Page, live_server: str) -> None:
    # `[0-9]{10,30}`: the first 10 steps allow digits only, the later ones the end too
    _nested(page, live_server, max_tokens=30)
    page.click('label.tab:has(input[value="regex"])')
    page.evaluate("(text) => MS.setSource(text)", "[0-9]{10,30}")
    expect(page.locator("#compile-result .stats")).to_contain_text("compiled")
    page.click("#btn-run")
    expect(page.locator("#status")).to_have_attribute("data-done", "true", timeout=120_000)
    steps = _steps(page)
    only = [
        bool(s["allowed_count"]) and (s["classes"] or {}).get("digit") == s["allowed_count"]  # type: ignore[attr-defined]
        for s in steps
    ]
    assert only[:10] == [True] * 10 and not any(only[10:]), only
    alarmed = [i for i, s in enumerate(steps) if s["alarms"]]
    # the default "digits only" alarm, from the 8th step of the run of allowed sets on
    assert alarmed == [7, 8, 9]
    assert all(s["alarms"] == ["digits_only k=8"] for s in steps[7:10])
    marked = page.locator("#timeline").get_attribute("data-alarms") or ""
    assert [int(i) for i in marked.split(",")] == alarmed  # one mark a step, not two
    expect(page.locator("#tokens .chip.alarm")).to_have_count(len(alarmed))
