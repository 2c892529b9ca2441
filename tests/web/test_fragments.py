"""HTML the page's routes once built in Python, now in templates: the same bytes as before."""

from __future__ import annotations

import pytest
from fastapi.templating import Jinja2Templates

from app.web.runtime.state import TEMPLATES_DIR
from app.web.ui import render


@pytest.fixture(scope="module")
def templates() -> Jinja2Templates:
    built = Jinja2Templates(directory=TEMPLATES_DIR)
    render.install(built.env)
    return built


def test_the_runner_is_the_element_the_route_used_to_build(templates: Jinja2Templates) -> None:
    html = templates.get_template("partials/_runner.html").render(session_id="Ab-_9", after=4)
    assert html == (
        '<div id="runner" sse-connect="/api/sessions/Ab-_9/events?after=4" '
        'sse-close="end" data-running="true">'
        '<div sse-swap="step" hx-target="#tokens" hx-swap="beforeend"></div>'
        '<div sse-swap="done,paused" hx-target="#status" hx-swap="outerHTML"></div></div>'
    )


@pytest.mark.parametrize(
    ("first", "last", "html"),
    [
        (3, 3, ""),
        (2, 4, '<span id="tok-2" hx-swap-oob="delete"></span>'
               '<span id="tok-3" hx-swap-oob="delete"></span>'),
    ],
)  # fmt: skip
def test_the_deletions_remove_the_chips_undone(
    templates: Jinja2Templates, first: int, last: int, html: str
) -> None:
    template = templates.get_template("partials/_deletions.html")
    assert template.render(first=first, last=last) == html
