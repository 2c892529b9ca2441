"""The static check of a Pydantic source, in the server process, before anything runs.

A source may only import from a few modules and define classes with annotated fields, literal
defaults, ``Field(...)`` and a few other allowlisted calls, enum members, type aliases and
``model_config = ConfigDict(...)``. Anything else is refused with its line, column and construct.
The source's size and nesting are checked before it is parsed: parsing itself runs here.
"""

from __future__ import annotations

import ast
import io
import math
import tokenize
import unicodedata
from dataclasses import dataclass
from typing import Literal

from app.exceptions import SourceRefused

__all__ = ["ALLOWED_MODULES", "check_source"]

ALLOWED_MODULES = frozenset(
    {
        "typing",
        "typing_extensions",
        "pydantic",
        "annotated_types",
        "enum",
        "datetime",
        "decimal",
        "uuid",
    }  # fmt: skip
)
ALLOWED_CALLS = frozenset(
    {
        "Field",
        "ConfigDict",
        "conint",
        "constr",
        "confloat",
        "conlist",
        "conset",
        "condecimal",
        "conbytes",
        "condate",
        "StringConstraints",
        "Ge",
        "Gt",
        "Le",
        "Lt",
        "MinLen",
        "MaxLen",
        "Len",
        "MultipleOf",
        "Interval",
        "Strict",
        "auto",
        "TypeVar",
    }  # fmt: skip
)
BUILTIN_TYPES = frozenset(
    {"int", "float", "str", "bool", "bytes", "list", "dict", "set", "frozenset", "tuple"}
)
MAX_SOURCE_BYTES = 64 * 1024
MAX_LINES = 3000
MAX_BRACKETS = 40
MAX_DEPTH = 64
MAX_STRING = 10_000
MAX_INT = 10**15

Context = Literal["type", "value"]

_STATEMENT_NAMES = {
    ast.FunctionDef: "functions and methods (validators do not change the JSON schema)",
    ast.AsyncFunctionDef: "functions and methods (validators do not change the JSON schema)",
    ast.For: "loops", ast.AsyncFor: "loops", ast.While: "loops", ast.If: "if statements",
    ast.With: "with statements", ast.AsyncWith: "with statements", ast.Try: "try statements",
    ast.Raise: "raise statements", ast.Assert: "assert statements", ast.Delete: "del statements",
    ast.Global: "global statements", ast.Nonlocal: "nonlocal statements",
    ast.AugAssign: "augmented assignments", ast.Return: "return statements",
    ast.Match: "match statements",
}  # fmt: skip


@dataclass(frozen=True)
class _Where:
    line: int
    column: int


def _refuse(node: ast.AST | _Where, what: str) -> SourceRefused:
    line = getattr(node, "lineno", None) if isinstance(node, ast.AST) else node.line
    column = getattr(node, "col_offset", None) if isinstance(node, ast.AST) else node.column - 1
    where = f"line {line}, column {(column or 0) + 1}: " if line else ""
    return SourceRefused(f"{where}{what}", line=line, column=None if column is None else column + 1)


def _scan_tokens(source: str) -> None:
    """Bracket nesting and look-alike characters, without building a tree."""
    depth = 0
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.OP and token.string in "([{":
                depth += 1
                if depth > MAX_BRACKETS:
                    where = _Where(*token.start[:1], token.start[1] + 1)
                    raise _refuse(where, f"brackets nested deeper than {MAX_BRACKETS}")
            elif token.type == tokenize.OP and token.string in ")]}":
                depth -= 1
            elif token.type == tokenize.NAME:
                normal = unicodedata.normalize("NFKC", token.string)
                if normal != token.string:
                    where = _Where(token.start[0], token.start[1] + 1)
                    raise _refuse(
                        where, f"the name {token.string!r} uses look-alike characters ({normal!r})"
                    )
    except (tokenize.TokenError, SyntaxError) as error:
        line = error.args[1][0] if len(error.args) > 1 and error.args[1] else None
        raise SourceRefused(f"syntax error: {error.args[0]}", line=line) from None


class _Checker:
    def __init__(self, tree: ast.Module) -> None:
        self.names: set[str] = set(BUILTIN_TYPES)
        for node in tree.body:  # classes and aliases may be used before they are defined
            if isinstance(node, ast.ClassDef):
                self.names.add(node.name)
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                self.names.update(t.id for t in targets if isinstance(t, ast.Name))

    # ---- statements ----
    def module(self, tree: ast.Module) -> None:
        for node in tree.body:
            if isinstance(node, ast.ImportFrom):
                self._import_from(node)
            elif isinstance(node, ast.Import):
                self._import(node)
            elif isinstance(node, ast.ClassDef):
                self._class(node)
            elif isinstance(node, ast.Assign):
                self._targets(node.targets)
                self.expr(node.value, "type")
            elif isinstance(node, ast.AnnAssign):
                self._targets([node.target])
                self.expr(node.annotation, "type")
                if node.value is not None:
                    self.expr(node.value, "type")
            elif not self._harmless(node):
                raise self._statement(node)

    def _statement(self, node: ast.stmt) -> SourceRefused:
        if isinstance(node, ast.Expr):  # say what is wrong inside first, e.g. a call to eval
            self.expr(node.value, "value")
            return _refuse(node, "expression statements are not allowed (only docstrings)")
        name = _STATEMENT_NAMES.get(type(node), f"{type(node).__name__} statements")
        return _refuse(node, f"{name} are not allowed")

    @staticmethod
    def _harmless(node: ast.stmt) -> bool:
        docstring = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        return isinstance(node, ast.Pass) or (
            docstring and isinstance(node.value.value, str)  # type: ignore[attr-defined]
        )

    def _import_from(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level or module.split(".")[0] not in ALLOWED_MODULES:
            allowed = ", ".join(sorted(ALLOWED_MODULES))
            raise _refuse(node, f"importing from {module or '.'!r} is not allowed (only {allowed})")
        for alias in node.names:
            if alias.name == "*":
                raise _refuse(node, "import * is not allowed: name what you import")
            self._check_name(node, alias.name)
            self._check_name(node, alias.asname or alias.name)
            self.names.add(alias.asname or alias.name)

    def _import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name.split(".")[0] not in ALLOWED_MODULES:
                allowed = ", ".join(sorted(ALLOWED_MODULES))
                raise _refuse(node, f"importing {alias.name!r} is not allowed (only {allowed})")
            bound = alias.asname or alias.name.split(".")[0]
            self._check_name(node, bound)
            self.names.add(bound)

    def _targets(self, targets: list[ast.expr]) -> None:
        for target in targets:
            if not isinstance(target, ast.Name):
                raise _refuse(target, "only plain names can be assigned")
            self._check_name(target, target.id)

    def _class(self, node: ast.ClassDef) -> None:
        self._check_name(node, node.name)
        if node.decorator_list:
            raise _refuse(node.decorator_list[0], "decorators are not allowed")
        for base in node.bases:
            self.expr(base, "type")
        for keyword in node.keywords:
            if keyword.arg is None or keyword.arg == "metaclass":
                raise _refuse(keyword.value, "metaclasses and **kwargs in a class are not allowed")
            self.expr(keyword.value, "value")
        for item in node.body:
            self._class_item(item)

    def _class_item(self, node: ast.stmt) -> None:
        if isinstance(node, ast.AnnAssign):
            self._targets([node.target])
            self.expr(node.annotation, "type")
            if node.value is not None:
                self.expr(node.value, "value")
        elif isinstance(node, ast.Assign):
            self._targets(node.targets)
            self.expr(node.value, "value")
        elif isinstance(node, ast.ClassDef):
            raise _refuse(node, "nested classes are not allowed: define the class at the top level")
        elif not self._harmless(node):
            raise self._statement(node)

    # ---- expressions ----
    @staticmethod
    def _check_name(node: ast.AST, name: str) -> None:
        if name.startswith("_"):
            raise _refuse(node, f"names starting with an underscore ({name!r}) are not allowed")

    def expr(self, root: ast.expr, context: Context) -> None:
        stack: list[tuple[ast.AST, Context, int]] = [(root, context, 0)]
        while stack:
            node, ctx, depth = stack.pop()
            if depth > MAX_DEPTH:
                raise _refuse(node, f"an expression nested deeper than {MAX_DEPTH}")
            stack.extend((child, c, depth + 1) for child, c in self._children(node, ctx))

    def _children(self, node: ast.AST, ctx: Context) -> list[tuple[ast.AST, Context]]:
        if isinstance(node, ast.Constant):
            return self._constant(node, ctx)
        if isinstance(node, ast.Name):
            self._check_name(node, node.id)
            if node.id not in self.names:
                raise _refuse(node, f"the name {node.id!r} is not defined or not allowed here")
            return []
        if isinstance(node, ast.Attribute):
            self._check_name(node, node.attr)
            if not isinstance(node.value, ast.Name | ast.Attribute):
                raise _refuse(node, "attributes are allowed only on names")
            return [(node.value, ctx)]
        if isinstance(node, ast.Subscript):
            return self._subscript(node, ctx)
        if isinstance(node, ast.Tuple | ast.List):
            return [(e, ctx) for e in node.elts]
        if isinstance(node, ast.Dict):
            for key in node.keys:
                if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                    raise _refuse(node, "dictionary keys must be strings")
            return [(v, "value") for v in node.values]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return [(node.left, ctx), (node.right, ctx)]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            if isinstance(node.operand, ast.Constant) and type(node.operand.value) in (int, float):
                return [(node.operand, ctx)]
        if isinstance(node, ast.Call):
            return self._call(node)
        raise _refuse(node, f"{_describe(node)} is not allowed here")

    def _constant(self, node: ast.Constant, ctx: Context) -> list[tuple[ast.AST, Context]]:
        value = node.value
        if isinstance(value, str | bytes) and len(value) > MAX_STRING:
            raise _refuse(node, f"a string longer than {MAX_STRING} characters")
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
            raise _refuse(node, f"an integer larger than {MAX_INT}")
        if isinstance(value, float) and not math.isfinite(value):
            raise _refuse(node, "a number that is not finite")
        if isinstance(value, complex):
            raise _refuse(node, "complex numbers are not allowed")
        if ctx == "type" and isinstance(value, str):  # a forward reference: check what it names
            try:
                parsed = ast.parse(value.strip(), mode="eval")
            except SyntaxError:
                raise _refuse(
                    node, f"the string annotation {value!r} is not an expression"
                ) from None
            for child in ast.walk(parsed):
                ast.copy_location(child, node)
            return [(parsed.body, "type")]
        return []

    def _subscript(self, node: ast.Subscript, ctx: Context) -> list[tuple[ast.AST, Context]]:
        base = node.value
        name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if name == "Literal":
            return [(base, ctx), *((i, "value") for i in items)]
        if name == "Annotated" and items:
            return [(base, ctx), (items[0], "type"), *((i, "value") for i in items[1:])]
        return [(base, ctx), *((i, ctx) for i in items)]

    def _call(self, node: ast.Call) -> list[tuple[ast.AST, Context]]:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name not in ALLOWED_CALLS:
            shown = name or _describe(func)
            raise _refuse(
                node, f"calling {shown} is not allowed (only {', '.join(sorted(ALLOWED_CALLS))})"
            )
        children: list[tuple[ast.AST, Context]] = [(func, "value")]
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                raise _refuse(arg, "*args are not allowed")
            children.append((arg, "value"))
        for keyword in node.keywords:
            if keyword.arg is None:
                raise _refuse(keyword.value, "**kwargs are not allowed")
            self._check_name(keyword.value, keyword.arg)
            children.append((keyword.value, "value"))
        return children


def _describe(node: ast.AST) -> str:
    names = {
        ast.Lambda: "a lambda", ast.BinOp: "arithmetic", ast.BoolOp: "a boolean operation",
        ast.Compare: "a comparison", ast.ListComp: "a comprehension",
        ast.SetComp: "a comprehension", ast.DictComp: "a comprehension",
        ast.GeneratorExp: "a generator", ast.Await: "await",
        ast.Yield: "yield", ast.YieldFrom: "yield", ast.IfExp: "a conditional expression",
        ast.NamedExpr: "an assignment expression", ast.Starred: "unpacking",
        ast.JoinedStr: "an f-string", ast.Set: "a set literal", ast.Slice: "a slice",
    }  # fmt: skip
    return names.get(type(node), type(node).__name__)


def check_source(source: str) -> None:
    """Refuse a Pydantic source that is too big, too nested, or uses a construct not allowed.

    Raises:
        SourceRefused: with the line, the column and the construct.
    """
    size = len(source.encode("utf-8", errors="surrogatepass"))
    if size > MAX_SOURCE_BYTES:
        raise SourceRefused(
            f"the source is {size} bytes; a Pydantic source may be {MAX_SOURCE_BYTES}"
        )
    if source.count("\n") + 1 > MAX_LINES:
        raise SourceRefused(f"the source has more than {MAX_LINES} lines")
    if "\0" in source:
        raise SourceRefused("the source contains a NUL character")
    _scan_tokens(source)
    try:
        tree = ast.parse(source, filename="<schema>")
    except SyntaxError as error:
        raise SourceRefused(
            f"syntax error: {error.msg}", line=error.lineno, column=error.offset
        ) from None
    except (RecursionError, MemoryError, ValueError) as error:
        raise SourceRefused(f"the source cannot be parsed: {type(error).__name__}") from None
    _Checker(tree).module(tree)
