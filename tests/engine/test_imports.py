"""The engine's modules import one another without a circle, counting every import the source
names: at module level, under ``TYPE_CHECKING``, and inside functions."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import app.engine

ENGINE = Path(app.engine.__file__).parent


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """What an import statement imports: ``from pkg import sub`` imports ``pkg.sub`` when that
    is a module, else ``pkg`` (the caller keeps the names that are modules)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        anchor = module.split(".") if is_package else module.split(".")[:-1]
        anchor = anchor[: len(anchor) - node.level + 1]
        base = ".".join([*anchor, base] if base else anchor)
    return [base, *(f"{base}.{alias.name}" for alias in node.names)]


def import_graph(root: Path = ENGINE) -> dict[str, set[str]]:
    """Each module under ``root`` -> the modules under ``root`` it imports, anywhere in it."""
    files = {_module_name(path, root): path for path in sorted(root.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            base, *names = _imported(node, module, path.name == "__init__.py")
            if isinstance(node, ast.Import):
                edges.update(n for n in (base, *names) if n in files)
            else:
                edges.update(n if n in files else base for n in names)
        graph[module] = {target for target in edges if target in files and target != module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every set of modules that import one another in a circle (Tarjan's components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = stack[stack.index(node) :]
            del stack[stack.index(node) :]
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_sees_every_kind_of_import() -> None:
    graph = import_graph()
    assert "app.engine.model.forward.local" in graph["app.engine.model.loading"]  # a.b import C
    assert (
        "app.engine.grammars.compile_worker" in graph["app.engine.grammars.compiler"]
    )  # a import b
    # imports inside a function count too
    assert "app.engine.grammars.schema_refs" in graph["app.engine.grammars.compile_worker"]


def test_cycles_are_found() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]


def test_the_engine_has_no_import_cycle() -> None:
    assert cycles(import_graph()) == []


def test_the_forward_engines_do_not_import_the_models() -> None:
    graph = import_graph()
    for module in ("app.engine.model.forward.base", "app.engine.model.forward.local"):
        assert not graph[module] & {"app.engine.model.loading", "app.engine.model.remote.model"}


#: The engine's rooms from the bottom: a module imports only from its own room or lower ones.
#: The modules directly in ``app/engine/`` (and ``kernels/``) are the shared leaves.
ROOMS = (
    "leaves",
    "model",
    "grammars",
    "masking",
    "stepper",
    "stacks",
    "engine",
    "factories",
    "front door",
)


def room_of(module: str) -> str:
    """The room a module of the engine is in."""
    parts = module.split(".")[2:]
    if not parts:
        return "front door"
    if parts[0] in ROOMS:
        return parts[0]
    return "leaves"


def test_every_room_exists() -> None:
    rooms = {room_of(m) for m in import_graph()}
    assert rooms == set(ROOMS)


def test_no_import_runs_back_up_between_the_rooms() -> None:
    up = sorted(
        f"{source} ({room_of(source)}) imports {target} ({room_of(target)})"
        for source, targets in import_graph().items()
        for target in targets
        if ROOMS.index(room_of(target)) > ROOMS.index(room_of(source))
    )
    assert up == []


def test_the_front_door_imports_nothing_until_a_name_is_used() -> None:
    import app.engine as door

    assert door.__all__ == sorted(door.__all__)
    for name in door.__all__:
        assert getattr(door, name) is not None, name


def loaded_after_import(module: str) -> set[str]:
    """The modules a fresh interpreter holds after importing ``module``."""
    code = f"import sys, {module}; print(' '.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


@pytest.mark.parametrize("module", ["app.engine", "app.engine.grammars.compile_worker"])
def test_the_front_door_and_the_compile_worker_load_no_torch(module: str) -> None:
    # The compile worker meets torch only through xgrammar itself, when it first compiles.
    assert not loaded_after_import(module) & {"torch", "transformers", "xgrammar"}
