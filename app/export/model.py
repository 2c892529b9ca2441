"""The Pydantic model a Python snippet defines: only the source Maskscope's sandbox ran.

The source as submitted never reaches a snippet. Its methods (validators...) were removed before
the sandbox ran it, and a method's default argument runs when its ``def`` does: on the machine of
whoever pastes the snippet. What the sandbox ran is written as is (it is code, on purpose) and
first, after the comments (a ``from __future__`` import must open a module). A snippet carries the
JSON Schema instead of the model, and says why, when the source holds a character that would not
show or would act when pasted (DEL erases the character before it in a terminal without bracketed
paste; bidirectional controls reorder what is shown), or binds a name the snippet itself uses.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from app.export.escape import Code, identifier
from app.export.request import ExportRequest
from app.pysource import parse_module

__all__ = ["Model", "clash", "model_of", "with_model"]

# Characters kept although str.isprintable() says no: line breaks and indentation.
_LAYOUT = frozenset("\n\t")


@dataclass(frozen=True)
class Model:
    """A Pydantic model as a snippet defines it.

    Attributes:
        source: the source the sandbox ran, its line ends ``\\n``.
        root: the root model's name (checked as an identifier).
        statements: how many top-level statements the source has (the snippet's first ones).
    """

    source: Code
    root: Code
    statements: int


def _unshown(text: str) -> str | None:
    """Where ``text`` holds a character that a terminal or an editor would not show as itself."""
    for number, line in enumerate(text.split("\n"), 1):
        for ch in line:
            if not ch.isprintable() and ch not in _LAYOUT:
                return f"U+{ord(ch):04X} at line {number}"
    return None


def _parse(text: str) -> ast.Module | None:
    try:
        return parse_module(text)
    # SystemError: a parse that other parses kept interrupting (app.pysource); the snippet
    # then falls back to the JSON Schema rather than fail.
    except (SyntaxError, ValueError, SystemError, RecursionError, MemoryError):
        return None


def model_of(req: ExportRequest) -> tuple[Model | None, str | None]:
    """The model a snippet may define for the request, else None and why not.

    Returns:
        ``(None, None)`` when the request has no Pydantic source.
    """
    if req.pydantic is None:
        return None, None
    text = req.pydantic.source.replace("\r\n", "\n").strip("\n")
    where = _unshown(text)
    if where is not None:
        return None, f"the source holds {where}, which would not show, or would act, when pasted"
    tree = _parse(text)
    if tree is None:
        return None, "the source could not be parsed here"
    root = identifier(req.pydantic.root)
    if root not in _bound(tree.body):
        return None, f"the source does not define {root} at its top level"
    return Model(Code(text), root, len(tree.body)), None


def _stored(nodes: Iterable[ast.AST]) -> set[str]:
    return {
        n.id
        for node in nodes
        for n in ast.walk(node)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }


def _bound(statements: Iterable[ast.stmt]) -> set[str]:
    """The module-level names ``statements`` bind (a class body's names are the class's)."""
    names: set[str] = set()
    for node in statements:
        if isinstance(node, ast.Import | ast.ImportFrom):
            names.update(a.asname or a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
            names |= _stored([*node.decorator_list, *getattr(node, "bases", [])])
        else:
            names |= _stored([node])
    return names


def _named(statements: list[ast.stmt]) -> set[str]:
    """Every name ``statements`` bind or read, at any depth."""
    names = {n.id for s in statements for n in ast.walk(s) if isinstance(n, ast.Name)}
    for node in (n for s in statements for n in ast.walk(s)):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names.update(a.asname or a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
    return names


def clash(code: str, model: Model) -> str | None:
    """Why ``code`` (a snippet that opens with ``model``'s source) cannot define the model: the
    source binds a name the rest of the snippet binds or reads, else None. The root model's name
    is read once on purpose (``compile_json_schema(Root)``, ``response_format=Root``); read again
    (``print``) or rebound (``MODEL``), it clashes too."""
    tree = _parse(code)
    if tree is None:
        return "the snippet could not be parsed here"
    source, own = tree.body[: model.statements], tree.body[model.statements :]
    root = str(model.root)
    clashes = (_bound(source) & _named(own)) - {root}
    reads = sum(isinstance(n, ast.Name) and n.id == root for s in own for n in ast.walk(s))
    if root in _bound(own) or reads > 1:
        clashes.add(root)
    if not clashes:
        return None
    return "the source binds names the snippet uses: " + ", ".join(sorted(clashes))


def with_model(req: ExportRequest, write: Callable[[Model | None, list[str]], str]) -> str:
    """The snippet ``write`` makes with the request's Pydantic model, when it may define it; else
    the one it makes without (with the JSON Schema), given a note saying why."""
    model, why = model_of(req)
    if model is not None:
        code = write(model, [])
        why = clash(code, model)
        if why is None:
            return code
    if why is None:
        return write(None, [])
    return write(None, [f"This snippet uses the JSON Schema instead of defining the model: {why}."])
