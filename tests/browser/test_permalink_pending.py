"""A permalink's tests on its page (issue 46): shown at once, pending with the verdicts recorded
at share time, then the page's own judgement replaces them (the Tests panel's request is held
by the test until the pending rows have been seen)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, Route, expect

from app.engine import Engine
from app.settings import Settings
from tests.conftest import serve

SLOW_GRAMMAR = {"kind": "ebnf", "source": 'root ::= root root | "a"'}


@pytest.fixture
def live_server(engine: Engine, tmp_path: Path) -> Iterator[str]:
    """A server of its own, on a permalink file of its own (a new one: the links are new)."""
    yield from serve(Settings(db_path=tmp_path / "p.db"), engine)


def test_a_permalinks_tests_show_pending_at_once_then_their_verdicts(
    page: Page, live_server: str
) -> None:
    body = {
        "grammar": SLOW_GRAMMAR, "raw_prompt": "A word:", "max_tokens": 4, "actions": [],
        "tests": [{"text": "aaaa", "expect": "pass"}, {"text": "ab", "expect": "pass"}],
    }  # fmt: skip
    shared = httpx.post(f"{live_server}/api/permalinks", json=body, timeout=60)
    assert shared.status_code == 201, shared.text
    held: list[Route] = []
    released: list[bool] = []

    def hold(route: Route) -> None:
        if released:
            route.continue_()
        else:
            held.append(route)

    page.route("**/ui/tests", hold)
    page.goto(f"{live_server}/s/{shared.json()['id']}")
    page.click('.compile-panel .tab-button[data-view="tests"]')
    rows = page.locator("#tests-result .test-row")
    expect(rows).to_have_count(2)
    expect(page.locator("#tests-result .test-row.pending")).to_have_count(2)
    expect(rows.nth(0)).to_contain_text("pending")
    expect(rows.nth(0).locator(".grammar-verdict")).to_have_text("accepts")  # at share time
    expect(rows.nth(1).locator(".grammar-verdict")).to_have_text("refuses")
    for _ in range(1200):  # the page compiles, then runs its tests: held here
        if held:
            break
        page.wait_for_timeout(50)
    assert held, "the page never ran its tests"
    released.append(True)
    for route in held:
        route.continue_()
    expect(page.locator("#tests-result .test-row.pending")).to_have_count(0, timeout=60_000)
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_contain_text("pass")
    expect(rows.nth(1)).to_contain_text("FAIL")
    expect(rows.nth(1).locator(".grammar-verdict")).to_contain_text("refuses at 1")
