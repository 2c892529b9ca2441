"""A live server on loopback and Debian's chromium driven by Playwright."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.tiers import refuse_outside_tier

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parent.parent.parent / "test-artifacts"
# Flags Debian's chromium needs here: no sandbox as root, and no background connections (the
# machine's closed network refuses them).
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-sync",
    "--disable-background-networking", "--disable-component-update",
]  # fmt: skip


@pytest.fixture(scope="session")
def browser(request: pytest.FixtureRequest) -> Iterator[Browser]:
    """Debian's chromium (``make test`` installs it; marks its tests ``browser``)."""
    refuse_outside_tier(request.config, "browser", "Chromium")
    assert CHROMIUM.exists(), "chromium is missing: run `make test`, which installs it"
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


# The page's CSP violations (app/web/middleware/security.py), as the page itself hears of them; the
# init
# script runs outside the page's CSP.
REPORT_CSP_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", (e) => console.error(
  `CSP violation: ${e.violatedDirective} blocked ${e.blockedURI || "inline"}`
  + ` at ${e.sourceFile}:${e.lineNumber}`));
"""


def csp_violations(messages: list[str]) -> list[str]:
    """The console lines that report a CSP violation (ours, or chromium's own "Refused to")."""
    return [m for m in messages if "CSP violation" in m or "Content Security Policy" in m]


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh 1280x800 page whose script errors and CSP violations fail the test."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.add_init_script(REPORT_CSP_VIOLATIONS)
    opened = context.new_page()
    errors: list[str] = []
    console: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    opened.on("console", lambda message: console.append(message.text))
    yield opened
    context.close()
    assert errors == [], errors
    assert csp_violations(console) == [], csp_violations(console)


@pytest.fixture
def patient() -> Iterator[None]:
    """Assertions wait 60 s: the CPU is shared (the Doctor examines each compile meanwhile), so
    steps may take seconds. A module opts in with ``pytestmark = usefixtures("patient")``."""
    expect.set_options(timeout=60_000)
    yield
    expect.set_options(timeout=5_000)


def shot(page: Page, name: str) -> None:
    """A screenshot of ``page`` in ``test-artifacts/{name}.png``, for review."""
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"))
