"""The page's route map (static/playground/routes.js): every entry is a route the app serves, every
entry is used, and no other file in static/ writes an app route (issue 44)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import fastapi.routing
import pytest

from app.main import create_app
from app.settings import Settings

STATIC = Path(__file__).resolve().parents[2] / "static"
ROUTE_MAP = STATIC / "playground" / "routes.js"
_ENTRY = re.compile(r'^\s*(\w+): "([^"]*)",$', re.MULTILINE)
# A route as a script would write it: "/api/..." or "/ui/...", or escaped in a regex literal.
_ROUTE_LITERAL = re.compile(r"\\?/(?:api|ui)\\?/")
# How the scripts name a route: MS.path("name", ...), MS.isRoute(path, "name") and, of a route
# MS.routeOf found, route.name === "name".
_NAMED = re.compile(r'MS\.path\("(\w+)"|MS\.isRoute\(.*?,\s*"(\w+)"\)|\broute\.name === "(\w+)"')


def route_map() -> list[tuple[str, str]]:
    """The route map's entries, (name, path template), in the order written."""
    text = ROUTE_MAP.read_text(encoding="utf-8")
    start = text.index("const ROUTES = Object.freeze({")
    return _ENTRY.findall(text[start : text.index("});", start)])


def scripts() -> list[Path]:
    """Our files in static/, the pinned libraries under vendor/ left out."""
    return sorted(
        p for p in STATIC.rglob("*") if p.is_file() and STATIC / "vendor" not in p.parents
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """The paths of the app's routes, path parameters as the app names them (no model loads)."""
    built = create_app(Settings(db_path=tmp_path_factory.mktemp("routes") / "maskscope.db"))
    routes: Iterable[Any] = built.routes
    # FastAPI >= 0.165 keeps included routers as such in ``app.routes``; this walks them.
    walk = getattr(fastapi.routing, "iter_route_contexts", None)
    if walk is not None:
        routes = walk(routes)
    return {route.path for route in routes if getattr(route, "methods", None)}


def test_every_route_in_the_map_is_one_the_app_serves(served: set[str]) -> None:
    entries = route_map()
    assert len(entries) >= 20, "the route map was not read"
    names = [name for name, _ in entries]
    assert len(set(names)) == len(names), "a name given twice"
    unserved = {path for _, path in entries if path not in served}
    assert unserved == set(), f"not served by the app: {sorted(unserved)}"


def test_every_route_the_scripts_name_is_in_the_map_and_every_entry_is_used() -> None:
    named = {
        next(group for group in found if group)
        for path in scripts()
        for found in _NAMED.findall(path.read_text(encoding="utf-8"))
    }
    mapped = {name for name, _ in route_map()}
    assert named - mapped == set(), "named by a script, missing from the map"
    assert mapped - named == set(), "in the map, named by no script"


def test_no_other_file_in_static_writes_an_app_route() -> None:
    writers = {
        f"{path.relative_to(STATIC)}:{line}"
        for path in scripts()
        if path != ROUTE_MAP
        for line, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if _ROUTE_LITERAL.search(text)
    }
    assert writers == set(), "write the route in static/playground/routes.js and use MS.path"
    assert _ROUTE_LITERAL.search(ROUTE_MAP.read_text(encoding="utf-8"))  # the pattern finds one
