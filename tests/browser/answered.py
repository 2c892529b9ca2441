"""The htmx requests a page has finished handling, as a signal to wait on instead of a fixed sleep.

htmx fires ``htmx:afterRequest`` once it is done with an answer: after the swap and its settle
(the page settles at once: ``defaultSettleDelay`` 0 in templates/base.html), or after the page
dropped the answer unswapped (app.js drops a stale one in ``htmx:beforeSwap``). Whatever that
answer could have done to the page, it has done by then, so a test may assert an absence.
"""

from __future__ import annotations

from playwright.sync_api import Page

__all__ = ["answered", "wait_answered"]

# Installed once per document; each entry is the path a finished request was sent to.
_WATCH = """() => {
  if (!window.__answered) {
    window.__answered = [];
    document.addEventListener("htmx:afterRequest",
      (event) => window.__answered.push((event.detail.pathInfo || {}).requestPath || ""));
  }
  return window.__answered.length;
}"""

_SINCE = """([pattern, since]) => window.__answered.slice(since)
  .some((path) => new RegExp(pattern).test(path))"""


def answered(page: Page) -> int:
    """Start counting the page's finished htmx requests (once per document).

    Returns:
        How many it has counted so far: pass it to :func:`wait_answered` as ``since``.
    """
    count: int = page.evaluate(_WATCH)
    return count


def wait_answered(page: Page, pattern: str, *, since: int, timeout_ms: float = 60_000) -> None:
    """Wait until a request whose path matches ``pattern`` (a JS regex) has been finished, counting
    from the ``since`` returned by :func:`answered` (called before the request was sent)."""
    page.wait_for_function(_SINCE, arg=[pattern, since], timeout=timeout_ms)
