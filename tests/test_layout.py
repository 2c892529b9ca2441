"""The layout rules a grep can check, checked over ``app/`` with ``ast``: who may import whom,
no private name used across modules, the module-size limit, and an import graph between app's
packages with no circle and no import from a lower layer to a higher one."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[1] / "app"

#: The most lines a module of the web layer or the CLI may have.
MAX_LINES = 350

#: Each package with the layer it sits in: a package may import only from its own layer or
#: lower ones (a higher number is a higher layer).
LAYERS = {
    "app.caps": 0,
    "app.exceptions": 0,
    "app.jsontext": 0,
    "app.redact": 0,
    "app.paths": 0,
    "app.pysource": 0,
    "app.verdicts": 0,
    "app.vocabulary": 0,
    "app.settings": 1,
    "app.examples": 1,
    "app.engine": 2,
    "app.sandbox": 2,
    "app.store": 2,
    "app.schematests": 3,
    "app.doctor": 3,
    "app.export": 3,
    "app.suite": 3,
    "app.web": 4,
    "app.main": 5,
    "app.cli": 6,
    "app.__main__": 6,
}


@dataclass(frozen=True)
class Import:
    """One import in a module: the module imported, and the names taken from it."""

    line: int
    module: str
    names: tuple[str, ...]


def module_name(path: Path) -> str:
    """The dotted name of a module of ``app/`` (a package is its ``__init__``)."""
    parts = list(path.relative_to(APP.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(under: Path = APP) -> list[Path]:
    """Every module below ``under``."""
    return sorted(under.rglob("*.py"))


def imports(path: Path) -> Iterator[Import]:
    """The imports of a module, relative ones made absolute."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(node.lineno, alias.name, ())
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            yield Import(node.lineno, base, tuple(a.name for a in node.names))


def package_of(module: str) -> str | None:
    """The entry of ``LAYERS`` a module of app belongs to."""
    for package in sorted(LAYERS, key=len, reverse=True):
        if module == package or module.startswith(package + "."):
            return package
    return None


def targets(imp: Import) -> list[str]:
    """The modules an import reaches: ``from app import web`` reaches ``app.web``."""
    if imp.module == "app":
        return [f"app.{n}" for n in imp.names]
    return [imp.module]


def imports_of(under: str) -> list[tuple[Path, Import]]:
    return [(p, i) for p in modules(APP / under) for i in imports(p)]


def test_ui_and_routes_never_import_each_other() -> None:
    found = [
        f"{p.relative_to(APP.parent)}:{i.line} imports {t}"
        for side, other in (("ui", "app.web.routes"), ("routes", "app.web.ui"))
        for p, i in imports_of(f"web/{side}")
        for t in targets(i) + [f"{i.module}.{n}" for n in i.names]
        if t == other or t.startswith(other + ".")
    ]
    assert found == []


def test_services_import_no_http_framework() -> None:
    found = [
        f"{p.relative_to(APP.parent)}:{i.line} imports {i.module}"
        for p, i in imports_of("web/services")
        if i.module.split(".")[0] in ("fastapi", "starlette", "sse_starlette")
    ]
    assert found == []


def test_services_import_neither_routes_nor_ui() -> None:
    found = [
        f"{p.relative_to(APP.parent)}:{i.line} imports {t}"
        for p, i in imports_of("web/services")
        for t in targets(i) + [f"{i.module}.{n}" for n in i.names]
        if t.startswith(("app.web.routes", "app.web.ui", "app.web.schemas.forms"))
    ]
    assert found == []


def private_uses(path: Path) -> Iterator[str]:
    """Private names of another module of app that ``path`` uses: ``from app.x import _y``, or
    ``x._y`` where ``x`` is a module of app it imported."""
    tree = ast.parse(path.read_text(), str(path))
    aliases: dict[str, str] = {}
    for imp in imports(path):
        if not imp.module.startswith("app"):
            continue
        for name in imp.names:
            if name.startswith("_") and not name.startswith("__"):
                yield f"line {imp.line}: from {imp.module} import {name}"
            aliases[name] = f"{imp.module}.{name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("app"):
                    aliases[alias.asname or alias.name] = alias.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            yield f"line {node.lineno}: {node.value.id}.{node.attr}"


def test_no_private_name_is_used_across_modules() -> None:
    found = [f"{p.relative_to(APP.parent)} {use}" for p in modules() for use in private_uses(p)]
    assert found == []


@pytest.mark.parametrize("folder", ["web", "cli"])
def test_modules_of_the_web_layer_and_the_cli_are_small(folder: str) -> None:
    long = {
        str(p.relative_to(APP.parent)): n
        for p in modules(APP / folder)
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def package_graph() -> dict[str, set[str]]:
    """Which package of app imports which other one (``LAYERS``' entries)."""
    graph: dict[str, set[str]] = {package: set() for package in LAYERS}
    for path in modules():
        source = package_of(module_name(path))
        if source is None:
            continue
        for imp in imports(path):
            for target in targets(imp):
                package = package_of(target)
                if package is not None and package != source:
                    graph[source].add(package)
    return graph


def test_every_module_of_app_has_a_layer() -> None:
    unplaced = [module_name(p) for p in modules() if package_of(module_name(p)) is None]
    assert unplaced == ["app"]


def test_no_import_from_a_lower_layer_to_a_higher_one() -> None:
    upward = sorted(
        f"{source} imports {target}"
        for source, reached in package_graph().items()
        for target in reached
        if LAYERS[target] > LAYERS[source]
    )
    assert upward == []


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A circle in ``graph``, or None."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return None
        for nxt in sorted(graph[node]):
            found = visit(nxt, [*path, node])
            if found:
                return found
        done.add(node)
        return None

    return next((c for n in sorted(graph) if (c := visit(n, [])) is not None), None)


def test_no_import_circle_between_packages() -> None:
    assert cycle(package_graph()) is None


def test_the_cycle_finder_finds_a_circle() -> None:
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


def test_web_imports_no_cli_and_lower_layers_no_web() -> None:
    graph = package_graph()
    assert "app.cli" not in graph["app.web"]
    lower = [p for p, layer in LAYERS.items() if layer < LAYERS["app.web"]]
    assert [p for p in lower if graph[p] & {"app.web", "app.cli", "app.__main__"}] == []


def module_graph(under: str) -> dict[str, set[str]]:
    """Which module of ``app/<under>`` imports which other one of it."""
    names = {module_name(p) for p in modules(APP / under)}
    graph: dict[str, set[str]] = {name: set() for name in names}
    for path in modules(APP / under):
        for imp in imports(path):
            # ``from pkg import sub`` reaches the module ``pkg.sub``, not ``pkg``'s __init__.
            subs = [f"{imp.module}.{n}" for n in imp.names]
            reached = [s if s in names else imp.module for s in subs] or targets(imp)
            graph[module_name(path)] |= {t for t in reached if t in names} - {module_name(path)}
    return graph


def packages() -> list[str]:
    """Every package of app, as a folder name below ``app/``."""
    return sorted(
        str(p.parent.relative_to(APP)) for p in APP.rglob("__init__.py") if p.parent != APP
    )


@pytest.mark.parametrize("under", ["", *packages()])
def test_no_import_circle_between_the_modules_of_a_package(under: str) -> None:
    assert cycle(module_graph(under)) is None


def test_the_module_graph_sees_a_circle_inside_a_function() -> None:
    # doctor.py once imported tools.py inside a method, and tools.py imported doctor.py.
    graph = module_graph("doctor")
    assert "app.doctor.tools" in graph["app.doctor.doctor"]
    assert "app.doctor.doctor" not in graph["app.doctor.tools"]


#: The web layer's rooms from the bottom: a module imports only from its own room or lower ones
#: (``ui`` and ``routes`` share the top and never import each other).
WEB_ROOMS = ("errors", "middleware", "runtime", "schemas", "services", "top")


def web_room(module: str) -> str:
    """The room of a module of ``app/web``."""
    part = module.split(".")[2] if module.count(".") >= 2 else "top"
    return part if part in WEB_ROOMS else "top"


def test_no_import_runs_back_up_between_the_web_layers_rooms() -> None:
    up = sorted(
        f"{source} imports {target}"
        for source, reached in module_graph("web").items()
        for target in reached
        if WEB_ROOMS.index(web_room(target)) > WEB_ROOMS.index(web_room(source))
    )
    assert up == []


def test_the_app_factory_is_short() -> None:
    source = (APP / "main.py").read_text()
    factory = source[source.index("def create_app") :]
    assert len(factory.splitlines()) <= 40
