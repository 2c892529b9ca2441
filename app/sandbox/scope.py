"""Where Python and pydantic look a name up in a Pydantic source, for the static check.

In a class body Python looks a name up in the class's own namespace first, then the module's: an
annotation, a ``Field(...)`` argument or a default that uses a name the body binds gets that
binding (``Literal: Any = List`` turns ``Literal["..."]`` into a ``List`` of a forward reference,
which pydantic evaluates). The value of ``x: T = v`` is bound before ``T`` is evaluated, and
pydantic evaluates string annotations after the body ran, in a namespace made of ``vars()`` of the
model it is building, then the module's: for a string, any binding in any class body counts,
wherever the string is written (a module-level alias is evaluated inside the model that uses it).

A bare annotated field (``id: int``) binds nothing, so a field may be named like a builtin or a
type; only one with a value (``type: Literal["cat"] = "cat"``) binds its name.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from app.sandbox.scan import refuse

__all__ = ["PYDANTIC_BINDS", "Binding", "class_bindings", "future_annotations", "shadowing"]

#: Names pydantic itself puts in every model's namespace, where string annotations are evaluated.
PYDANTIC_BINDS = frozenset({"model_config"})


@dataclass(frozen=True, slots=True)
class Binding:
    """A name bound in a class body: the class, and the line of its first binding."""

    owner: str
    line: int


def class_bindings(node: ast.ClassDef) -> dict[str, Binding]:
    """The names a class body binds: assignments, and annotated assignments with a value.

    Only plain names are collected; the check refuses any other target.
    """
    bound: dict[str, Binding] = {}
    for item in node.body:
        targets: list[ast.expr] = []
        if isinstance(item, ast.Assign):
            targets = item.targets
        elif isinstance(item, ast.AnnAssign) and item.value is not None:
            targets = [item.target]
        for target in targets:
            if isinstance(target, ast.Name):
                bound.setdefault(target.id, Binding(node.name, item.lineno))
    return bound


def _is_future(node: ast.stmt) -> bool:
    return isinstance(node, ast.ImportFrom) and node.module == "__future__" and node.level == 0


def future_annotations(tree: ast.Module) -> bool:
    """Whether the source opens with ``from __future__ import annotations``, which turns every
    annotation into a string that pydantic evaluates later, in the model's namespace.

    Raises:
        SourceRefused: another future feature (``barry_as_FLUFL`` changes how the source parses),
            an ``as`` alias, or a future import after other statements.
    """
    found = False
    opening = True  # a docstring, then future imports, as Python requires
    for index, node in enumerate(tree.body):
        docstring = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        docstring = docstring and isinstance(node.value.value, str)  # type: ignore[attr-defined]
        if not _is_future(node):
            opening = opening and index == 0 and docstring
            continue
        if not opening:
            raise refuse(node, "from __future__ imports must come first (after the docstring)")
        assert isinstance(node, ast.ImportFrom)
        for alias in node.names:
            if alias.name != "annotations" or alias.asname is not None:
                raise refuse(
                    node, "from __future__, only 'import annotations' (without 'as') is allowed"
                )
        found = True
    return found


def shadowing(name: str, binding: Binding | None, *, in_string: bool) -> str:
    """Why ``name`` is refused where it would mean what a class body binds (or pydantic, when
    ``binding`` is None), not what it names in the module."""
    if binding is None:
        bound = f"pydantic binds {name!r} in every model's namespace"
    else:
        bound = f"class {binding.owner} binds {name!r} in its body (line {binding.line})"
    if in_string:
        return (
            f"the name {name!r} in a string annotation: pydantic evaluates it in the namespace "
            f"of the model it builds first, and {bound}, so it could be that attribute, not what "
            f"{name!r} names in the module. Rename the field or attribute"
        )
    return (
        f"the name {name!r} is looked up in the class body first, and {bound}: here it is that "
        f"attribute, not what {name!r} names in the module. Rename the field or attribute"
    )
