"""The API pages stay true: their routes, fields, error codes and CLI options are the ones built.

The reference is docs/api.md and the pages under docs/api/, read here as one document (the page,
then the others in file-name order).

Everything is read from what the code answers (the app's OpenAPI schema and routes, the record
dataclasses, the error classes, ``python -m app --help``), never from where a module lives, so
the checks survive the code moving between modules.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import fastapi.routing
import pytest
from fastapi import FastAPI

import app as app_package
from app import exceptions
from app.cli import main as cli
from app.engine import StopReason, records
from app.main import create_app
from app.settings import Settings
from app.web.errors import STATUS, install_error_handlers

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "docs" / "api.md", *sorted((ROOT / "docs" / "api").glob("*.md"))]
DOC = "\n".join(page.read_text(encoding="utf-8") for page in PAGES)

#: FastAPI's default 422 body: declared in OpenAPI, never sent (the error handler answers
#: ``ErrorOut`` instead), so not documented as ours.
FASTAPI_OWN = {"HTTPValidationError", "ValidationError"}


def section(doc: str, heading: str) -> str:
    """The text under ``heading`` (a whole line) up to the next heading of the same or a higher
    level."""
    level = len(heading) - len(heading.lstrip("#"))
    lines = doc.splitlines()
    assert heading in lines, f"no API page has the heading {heading!r}"
    start = lines.index(heading) + 1
    end = next(
        (i for i in range(start, len(lines)) if re.match(rf"^#{{1,{level}}} ", lines[i])),
        len(lines),
    )
    return "\n".join(lines[start:end])


def rows(text: str) -> list[list[str]]:
    """The cells of every table row in ``text``, its header and separator rows left out."""
    table = [line for line in text.splitlines() if line.startswith("|")]
    out = []
    for line in table[2:] if table else []:
        out.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return out


def unquoted(cell: str) -> str:
    """A cell that names one thing in backticks, without them."""
    found = re.fullmatch(r"`([^`]+)`", cell)
    assert found, f"expected a name in backticks, got {cell!r}"
    return found.group(1)


def first_column(text: str) -> list[str]:
    """The names in the first column of the table in ``text``."""
    return [unquoted(cells[0]) for cells in rows(text)]


def field_tables(doc: str) -> dict[str, list[str]]:
    """Every ``### `Name` `` heading and the names in its table's first column."""
    names = re.findall(r"^### `(\w+)`$", doc, flags=re.MULTILINE)
    return {name: first_column(section(doc, f"### `{name}`")) for name in names}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> FastAPI:
    """The app as ``create_app`` builds it (no model is loaded: nothing here starts it)."""
    return create_app(Settings(db_path=tmp_path_factory.mktemp("docs") / "maskscope.db"))


@pytest.fixture(scope="module")
def openapi(built: FastAPI) -> dict[str, Any]:
    """The app's OpenAPI document."""
    return built.openapi()


@pytest.fixture(scope="module")
def page_routes(built: FastAPI) -> set[tuple[str, str]]:
    """The app's own routes left out of the OpenAPI document (the page), as (method, path)."""
    routes: Iterable[Any] = built.routes
    # FastAPI >= 0.165 keeps included routers as such in ``app.routes``; this walks them.
    walk = getattr(fastapi.routing, "iter_route_contexts", None)
    if walk is not None:
        routes = walk(routes)
    return {
        (method, route.path)
        for route in routes
        if getattr(route, "include_in_schema", True) is False
        and str(getattr(route.endpoint, "__module__", "")).startswith("app.")
        for method in route.methods or ()
    }


def record_dataclasses() -> dict[str, list[str]]:
    """The records the engine answers with, by name: their fields."""
    out = {}
    for name in records.__all__:
        value = getattr(records, name)
        if isinstance(value, type) and dataclasses.is_dataclass(value):
            out[name] = [f.name for f in dataclasses.fields(value)]
    return out


def openapi_models(openapi: dict[str, Any]) -> dict[str, list[str]]:
    """The request and answer models of the OpenAPI schema, by name: their top-level fields
    (enums, which a model may name, are not models)."""
    schemas = openapi["components"]["schemas"]
    return {
        name: list(schema.get("properties", {}))
        for name, schema in schemas.items()
        if name not in FASTAPI_OWN and "enum" not in schema
    }


def body_models(openapi: dict[str, Any]) -> set[str]:
    """Every model a request body names, and the models those hold."""
    refs = re.findall(r"#/components/schemas/(\w+)", repr(_bodies(openapi)))
    found: set[str] = set()
    schemas = openapi["components"]["schemas"]
    while refs:
        name = refs.pop()
        if name not in found:
            found.add(name)
            refs += re.findall(r"#/components/schemas/(\w+)", repr(schemas[name]))
    return found


def _bodies(openapi: dict[str, Any]) -> list[Any]:
    return [
        operation["requestBody"]
        for operations in openapi["paths"].values()
        for operation in operations.values()
        if "requestBody" in operation
    ]


def test_every_json_route_is_documented_and_every_documented_one_exists(
    openapi: dict[str, Any],
) -> None:
    built = {
        (method.upper(), path)
        for path, operations in openapi["paths"].items()
        for method in operations
    }
    table = rows(section(DOC, "### JSON API"))
    documented = [(unquoted(cells[0]), unquoted(cells[1])) for cells in table]
    assert len(documented) == len(set(documented)), "a route is documented twice"
    assert set(documented) - built == set(), "documented, but not a route"
    assert built - set(documented) == set(), "a route that the API pages do not list"


def test_every_page_route_is_documented_and_every_documented_one_exists(
    page_routes: set[tuple[str, str]],
) -> None:
    table = rows(section(DOC, "### Page routes"))
    documented = {(unquoted(cells[0]), unquoted(cells[1])) for cells in table}
    assert documented - page_routes == set(), "documented, but not a page route"
    assert page_routes - documented == set(), "a page route that the API pages do not list"


def test_every_body_model_has_its_table(openapi: dict[str, Any]) -> None:
    tables = field_tables(DOC)
    missing = body_models(openapi) - set(tables)
    assert missing == set(), "request body models without a table"


def test_every_field_table_names_exactly_the_fields_built(openapi: dict[str, Any]) -> None:
    models = openapi_models(openapi)
    dataclass_fields = record_dataclasses()
    assert set(models) & set(dataclass_fields) == set(), "a model and a record share a name"
    built = models | dataclass_fields
    tables = field_tables(DOC)
    assert set(tables) - set(built) == set(), "tables for no model or record"
    assert set(built) - set(tables) == set(), "models or records without a table"
    for name, fields in built.items():
        assert len(tables[name]) == len(set(tables[name])), f"{name}: a field listed twice"
        assert set(tables[name]) - set(fields) == set(), f"{name}: documented, not a field"
        assert set(fields) - set(tables[name]) == set(), f"{name}: fields not documented"


def test_the_step_record_is_documented_field_by_field() -> None:
    documented = first_column(section(DOC, "### `StepRecord`"))
    fields = [f.name for f in dataclasses.fields(records.StepRecord)]
    assert documented == fields  # in the dataclass's order, so a reader finds them


def _choices(schema: Any, schemas: dict[str, Any]) -> list[Any]:
    """The values a property's schema allows, when it lists them (a ``Literal`` or an enum)."""
    if not isinstance(schema, dict):
        return []
    if "$ref" in schema:
        return _choices(schemas[schema["$ref"].rsplit("/", 1)[-1]], schemas)
    out = [*schema.get("enum", []), *([schema["const"]] if "const" in schema else [])]
    for key in ("anyOf", "oneOf", "allOf", "prefixItems", "items"):
        inner = schema.get(key)
        for item in inner if isinstance(inner, list) else [inner]:
            out += _choices(item, schemas)
    return out


def test_every_choice_of_a_field_is_in_its_row(openapi: dict[str, Any]) -> None:
    schemas = openapi["components"]["schemas"]
    for name in openapi_models(openapi):
        table = {
            unquoted(cells[0]): " | ".join(cells) for cells in rows(section(DOC, f"### `{name}`"))
        }
        for field, prop in schemas[name].get("properties", {}).items():
            if "$ref" in prop and "enum" not in schemas[prop["$ref"].rsplit("/", 1)[-1]]:
                continue  # a model: its own table lists its choices
            for choice in _choices(prop, schemas):
                assert f'"{choice}"' in table[field], f"{name}.{field}: {choice!r} not documented"


def test_every_stop_reason_is_documented() -> None:
    text = section(DOC, "### Step response")
    for reason in StopReason:
        assert f'"{reason.value}"' in text and f"`{reason.value}`" in text, reason


def _error_classes() -> list[type[exceptions.MaskscopeError]]:
    found, todo = [], list(exceptions.MaskscopeError.__subclasses__())
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo += cls.__subclasses__()
    return found


def _status(cls: type[exceptions.MaskscopeError]) -> int:
    return next((STATUS[c] for c in cls.__mro__ if c in STATUS), 500)


def _sources() -> str:
    package = Path(app_package.__file__).parent
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted(package.rglob("*.py")))


def _handler_codes() -> dict[str, int]:
    """The codes the error handlers give HTTP errors of their own (404, 405...), by code."""
    module = sys.modules[install_error_handlers.__module__]
    source = Path(str(module.__file__)).read_text(encoding="utf-8")
    return {code: int(status) for status, code in re.findall(r'\b([1-5]\d\d): "([a-z_]+)"', source)}


def status_table() -> dict[str, int]:
    table = rows(section(DOC, "## Status codes"))
    codes = [unquoted(cells[1]) for cells in table]
    assert len(codes) == len(set(codes)), "a code is listed twice"
    return {unquoted(cells[1]): int(cells[0]) for cells in table}


def test_every_error_code_is_in_the_status_table_with_its_status() -> None:
    documented = status_table()
    for cls in _error_classes():
        assert cls.code in documented, f"{cls.__name__}: {cls.code} is not documented"
        assert documented[cls.code] == _status(cls), f"{cls.code}: the status differs"
    for code, status in _handler_codes().items():
        assert documented.get(code) == status, f"{code}: the handlers answer {status}"
    literal = set(re.findall(r'"code":\s*"([a-z_]+)"', _sources()))
    assert literal - set(documented) == set(), "codes sent that are not documented"


def test_every_documented_error_code_is_sent_somewhere() -> None:
    sources = _sources()
    for code in status_table():
        assert f'"{code}"' in sources, f"{code} is documented, but no code sends it"


def test_the_error_detail_is_the_error_shape(openapi: dict[str, Any]) -> None:
    detail = openapi["components"]["schemas"]["ErrorDetail"]
    assert set(detail["properties"]) == {"message", "code", "line", "column", "pointer"}
    assert set(detail["required"]) == {"message", "code"}
    assert '{"error": {"message", "code", "line"?, "column"?,\n"pointer"?}}' in DOC


def _help(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit) as exited:
        cli.parser().parse_args([*args, "--help"])
    assert exited.value.code == 0
    return capsys.readouterr().out


def test_every_cli_command_and_option_is_documented(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    found = re.search(r"\{([a-z,]+)\}", _help(monkeypatch, capsys))
    assert found
    commands = set(found.group(1).split(","))
    documented = set(re.findall(r"^### `python -m app (\w+)`$", DOC, flags=re.MULTILINE))
    assert documented == commands
    shared = set(first_column(section(DOC, "### Grammar options")))
    for command in commands:
        text = section(DOC, f"### `python -m app {command}`")
        listed = set(first_column(text))
        if "Takes the grammar options" in text:
            listed |= shared
        help_text = _help(monkeypatch, capsys, command)
        options = set(re.findall(r"^  (?:-\w, )?(--[a-z][a-z-]*)", help_text, flags=re.MULTILINE))
        options.discard("--help")
        assert listed - options == set(), f"{command}: documented, not an option"
        assert options - listed == set(), f"{command}: options not documented"


def test_the_readme_links_the_document() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "(docs/api.md)" in section(readme, "## HTTP API")


def test_every_api_page_is_in_the_site_and_linked_from_the_first() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    first = PAGES[0].read_text(encoding="utf-8")
    for page in PAGES[1:]:
        assert f"api/{page.name}" in nav, f"{page.name} is not in the site's nav"
        assert f"(api/{page.name})" in first, f"docs/api.md does not link {page.name}"
    assert len(PAGES) > 1, "the reference is split over pages"
