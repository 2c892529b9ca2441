"""The Suite view in a real browser: a zip of the fixture suite uploaded, the progress bar fed by
the suite's events to its end, the table sorted by a status column and filtered, a row opened in
the playground with the Doctor's marks, and the suite's link reopened."""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from app.engine import Engine
from app.settings import Settings
from tests.browser.conftest import shot
from tests.conftest import serve

pytestmark = pytest.mark.usefixtures("patient")

SUITE = Path(__file__).resolve().parents[1] / "fixtures" / "suite"
FILES = ["schemas/person.json", "schemas/person.tests.jsonl", "schemas/tags.json",
         "schemas/broken.json", "grammars/yesno.ebnf", "grammars/yesno.tests.jsonl"]  # fmt: skip


@pytest.fixture
def live_server(engine: Engine, tmp_path: Path) -> Iterator[str]:
    """A server of its own, on a store of its own: the suite is checked here, never found."""
    yield from serve(Settings(db_path=tmp_path / "suites.db"), engine)


@pytest.fixture
def suite_zip(tmp_path: Path) -> Path:
    """The fixture suite's small part, zipped."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in FILES:
            archive.write(SUITE / name, name)
    path = tmp_path / "suite.zip"
    path.write_bytes(out.getvalue())
    return path


def _names(page: Page, *, visible: bool = False) -> list[str]:
    rows = page.locator("#suite-rows tr.suite-row" + (":visible" if visible else ""))
    return [str(rows.nth(i).get_attribute("data-name")) for i in range(rows.count())]


def test_a_suite_is_uploaded_watched_sorted_filtered_opened_and_reopened(
    page: Page, live_server: str, suite_zip: Path
) -> None:
    page.goto(f"{live_server}/suites")
    page.set_input_files("#suite-file", str(suite_zip))
    page.click("#suite-submit")
    page.wait_for_url(re.compile(r"/suites/[A-Za-z0-9_-]{12}$"))
    suite_url = page.url
    bar = page.locator("#suite-progress")
    expect(bar).to_have_js_property("max", 4)
    seen = {int(bar.evaluate("b => b.value"))}
    for _ in range(2400):  # each value the bar shows, until its end (a few seconds a source)
        seen.add(int(bar.evaluate("b => b.value")))
        if 4 in seen:
            break
        page.wait_for_timeout(50)
    assert 4 in seen and min(seen) < 4, seen
    expect(page.locator("#suite-summary")).to_contain_text("4 of 4 sources checked")
    expect(page.locator("#suite")).to_have_attribute("data-status", "done")
    shot(page, "suite-done")

    status = page.locator('#suite-table th[data-column="0"]')
    status.click()  # failing first: the file that does not compile, then the ignored keyword
    assert _names(page)[:2] == ["schemas/broken.json", "schemas/tags.json"]
    expect(status).to_have_attribute("aria-sort", "descending")
    status.click()
    assert _names(page)[-2:] == ["schemas/tags.json", "schemas/broken.json"]

    page.fill("#suite-filter", "tags")
    expect(page.locator("#suite-rows tr.suite-row:visible")).to_have_count(1)
    page.fill("#suite-filter", "")
    page.select_option("#suite-status", "error")
    assert _names(page, visible=True) == ["schemas/broken.json"]
    expect(page.locator("#suite-count")).to_have_text("1 of 4 sources shown")
    page.select_option("#suite-status", "")

    page.locator('tr[data-name="schemas/tags.json"] a.open-source').click()
    page.wait_for_url(re.compile(r"/s/[A-Za-z0-9_-]{12}$"))
    expect(page.locator("#editor")).to_contain_text("uniqueItems")
    page.click('.compile-panel .tab-button[data-view="doctor"]')
    ignored = page.locator('#doctor-result tr.status-ignored[data-pointer="/uniqueItems"]')
    expect(ignored).to_be_visible()  # the suite's finding, the Doctor's on this source
    expect(page.locator("#doctor-flag")).not_to_have_text("")
    expect(page.locator(".cm-lint-marker-warning")).to_have_count(1)  # marked in the editor
    shot(page, "suite-opened")

    page.goto(suite_url)  # the permalink: the kept report, nothing checked again
    expect(page.locator("#suite")).to_have_attribute("data-status", "done")
    expect(bar).to_have_js_property("value", 4)
    expect(page.locator("#suite-rows tr.suite-row")).to_have_count(4)
    expect(page.locator('tr[data-name="schemas/tags.json"] .badge.level-ignored')).to_have_text(
        "ignored 1"
    )
