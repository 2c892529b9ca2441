"""One page for a whole test module, its script errors and CSP violations failing the module."""

from __future__ import annotations

import json
from collections.abc import Iterator

from playwright.sync_api import Browser, Page, ViewportSize, expect

from tests.browser.conftest import REPORT_CSP_VIOLATIONS, csp_violations

WIDE: ViewportSize = {"width": 1440, "height": 900}
SMALL: ViewportSize = {"width": 1280, "height": 720}
# xgrammar ignores maxLength beside a pattern (xgrammar#966); SGLang refuses the pair (HTTP 400)
PATTERN_AND_LENGTH = json.dumps(
    {
        "type": "object",
        "properties": {
            "id": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]+$", "maxLength": 8},
            "status": {"type": "string"},
        },
        "required": ["id", "status"],
        "additionalProperties": False,
    },
    indent=2,
)


class Shared:
    """The module's page and the errors it raised."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.errors: list[str] = []
        self.console: list[str] = []
        page.on("pageerror", lambda error: self.errors.append(str(error)))
        page.on("console", lambda message: self.console.append(message.text))

    def fresh(self, url: str, viewport: ViewportSize = WIDE) -> Page:
        """The page at ``viewport`` on ``url`` as on a first visit (no stored layout)."""
        self.page.set_viewport_size(viewport)
        self.page.goto(url)
        self.page.evaluate("() => localStorage.clear()")
        self.page.goto("about:blank")
        self.page.goto(url)
        return self.page

    def example(self, server: str, example: str, viewport: ViewportSize = WIDE) -> Page:
        """:meth:`fresh` on ``?example=``, once its source compiled."""
        page = self.fresh(f"{server}/?example={example}", viewport)
        compiled(page)
        return page


def shared_page(browser: Browser) -> Iterator[Shared]:
    """A module fixture's body: the page, then the check that it raised no error."""
    context = browser.new_context(viewport=WIDE)
    context.add_init_script(REPORT_CSP_VIOLATIONS)
    try:
        yield Shared(context.new_page())
    finally:
        context.close()


def raised_nothing(shared: Shared) -> None:
    """The page threw no script error and broke no CSP rule."""
    assert shared.errors == [], shared.errors
    violations = csp_violations(shared.console)
    assert violations == [], violations


# Hit at its four edges by the element itself: not clipped by a scrolling column, not covered.
HIT_AT_EDGES = """(sel) => {
  const el = document.querySelector(sel), r = el.getBoundingClientRect();
  const hit = (x, y) => el.contains(document.elementFromPoint(x, y));
  const mx = r.left + r.width / 2, my = r.top + r.height / 2;
  return hit(r.left + 2, my) && hit(r.right - 2, my) && hit(mx, r.top + 2) && hit(mx, r.bottom - 2);
}"""


def in_view(page: Page, selector: str) -> None:
    """The element is displayed whole inside the window, neither clipped nor covered."""
    expect(page.locator(selector).first).to_be_in_viewport(ratio=1)
    assert page.evaluate(HIT_AT_EDGES, selector), f"{selector} is cut off or covered"


def compiled(page: Page) -> None:
    """The compile panel says the source compiled."""
    expect(page.locator("#compile-result .stats")).to_contain_text("compiled")


def steps(page: Page, n: int) -> None:
    """``n`` clicks of Step, and their chips in the page."""
    before = page.locator("#tokens .chip").count()
    for _ in range(n):
        page.click("#btn-step")
    expect(page.locator("#tokens .chip")).to_have_count(before + n)


def inspecting(page: Page, taken: int, index: int) -> None:
    """``taken`` steps, then step ``index`` clicked and shown in the inspector."""
    steps(page, taken)
    page.locator(f"#tok-{index}").click()
    expect(page.locator("#inspector")).to_have_attribute("data-index", str(index))


def pick_vllm_builder(page: Page) -> None:
    """The Tools tab's builder set to vllm, once vLLM's code has started in its process."""
    expect(page.locator('#tools-builder option[value="vllm"]')).to_be_enabled(timeout=180_000)
    page.select_option("#tools-builder", "vllm")
