"""The static check of a Pydantic source, in the server process, before anything runs.

A source may only import from a few modules and define classes with annotated fields, literal
defaults, ``Field(...)`` and a few other allowlisted calls, enum members, type aliases and
``model_config = ConfigDict(...)``. Anything else is refused with its line, column and construct.
The source's size and nesting are checked before it is parsed (``scan``): parsing runs here.

Names are resolved as Python and pydantic will (``scope``): in a class body, a name the body binds
is refused wherever it would be looked up there, and a string annotation (every annotation, under
``from __future__ import annotations``) is parsed and checked like code, refusing any name a class
body binds, since pydantic evaluates it later in a model's namespace.
"""

from __future__ import annotations

import ast
import builtins
import math
import types
from dataclasses import dataclass
from typing import Literal

from app.exceptions import SourceRefused
from app.pysource import parse_expression, parse_module
from app.sandbox.callables import (
    CALLED,
    DATA_TOO,
    ENCODERS,
    describe,
    is_function,
    is_pure,
    pure_names,
)
from app.sandbox.reach import (
    ALLOWED_CALLS,
    ALLOWED_MODULES,
    Unreachable,
    allowed_call,
    follow,
    imported,
    is_type_argument,
    special_form,
)
from app.sandbox.scan import refuse as _refuse
from app.sandbox.scan import scan, scan_expression
from app.sandbox.scope import (
    PYDANTIC_BINDS,
    Binding,
    class_bindings,
    future_annotations,
    shadowing,
)

__all__ = ["ALLOWED_MODULES", "CheckedSource", "check_source"]

BUILTIN_TYPES = frozenset(
    {"int", "float", "str", "bool", "bytes", "list", "dict", "set", "frozenset", "tuple"}
)
MAX_DEPTH = 64
MAX_STRING = 10_000
MAX_INT = 10**15
MAX_ANNOTATION = 2000  # characters of a string annotation written in the source

# "callee": the function of an allowed call, checked like a value but never refused as a function
Context = Literal["type", "value", "callee"]
_UNKNOWN = object()  # what :meth:`_Checker._real` returns for what is not an imported object
# What the check refuses wherever it is: left to its own message in a place pydantic calls.
_REFUSED_ANYWAY = (
    ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Await, ast.Yield,
    ast.YieldFrom, ast.IfExp, ast.NamedExpr, ast.Starred, ast.JoinedStr, ast.Set, ast.Slice,
    ast.BoolOp, ast.Compare,
)  # fmt: skip

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


class _Checker:
    def __init__(self, tree: ast.Module) -> None:
        self.imported: dict[str, object] = {}  # what each imported name is bound to
        self.defined: set[str] = set()
        for node in tree.body:  # classes and aliases may be used before they are defined
            if isinstance(node, ast.ClassDef):
                self.defined.add(node.name)
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                self.defined.update(t.id for t in targets if isinstance(t, ast.Name))
        self.names: set[str] = set(BUILTIN_TYPES | self.defined)
        assigned = self.defined - {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
        # names bound only by a class statement: what pydantic may call (constructs) as it is
        self.classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)} - assigned
        self.future = future_annotations(tree)
        # Any class body's bindings, for strings: pydantic evaluates them in a model's namespace.
        self.class_bound: dict[str, Binding] = {}
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                for name, binding in class_bindings(node).items():
                    self.class_bound.setdefault(name, binding)
        self.scope: dict[str, Binding] = {}  # the bindings of the class body being checked
        self.in_string: set[int] = set()  # ids of the nodes parsed from strings (or annotations,
        self._parsed: list[ast.AST] = []  # under the future import), kept so that ids stay unique

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
                self._annotation(node.annotation)
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
        if module == "__future__" and not node.level:  # checked by future_annotations
            return
        self._allowed_module(node, module, f"importing from {module or '.'!r}", node.level)
        for alias in node.names:
            if alias.name == "*":
                raise _refuse(node, "import * is not allowed: name what you import")
            self._bind(node, alias.asname or alias.name, _lookup(node, module, [alias.name]))

    def _import(self, node: ast.Import) -> None:
        for alias in node.names:
            module = alias.name
            self._allowed_module(node, module, f"importing {module!r}")
            value = _lookup(node, module)
            if alias.asname is None:  # ``import a.b`` binds ``a``
                value = _lookup(node, module.split(".")[0])
            self._bind(node, alias.asname or module.split(".")[0], value)

    def _allowed_module(self, node: ast.AST, module: str, doing: str, level: int = 0) -> None:
        if level or module.split(".")[0] not in ALLOWED_MODULES:
            allowed = ", ".join(sorted(ALLOWED_MODULES))
            raise _refuse(node, f"{doing} is not allowed (only {allowed})")
        for part in module.split("."):
            self._check_name(node, part)

    def _bind(self, node: ast.AST, name: str, value: object) -> None:
        self._check_name(node, name)
        if name in self.defined:
            raise _refuse(node, f"the name {name!r} is both imported and defined in the source")
        if name in self.imported and self.imported[name] is not value:
            # a model completed later (a forward reference) would see the second binding
            raise _refuse(node, f"the name {name!r} is imported twice, as different things")
        self.imported[name] = value
        self.names.add(name)

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
            if keyword.arg in CALLED:  # pydantic takes class keywords for its config
                self._called(keyword.arg, keyword.value)
            self.expr(keyword.value, "value")
        self.scope = class_bindings(node)  # the bases and keywords were looked up in the module
        try:
            for item in node.body:
                self._class_item(item)
        finally:
            self.scope = {}

    def _class_item(self, node: ast.stmt) -> None:
        if isinstance(node, ast.AnnAssign):
            self._targets([node.target])
            self._annotation(node.annotation)
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
    def _annotation(self, annotation: ast.expr) -> None:
        """An annotation: code evaluated now, or, under the future import, the string Python
        makes of it (the same tree, once parsed), evaluated later by pydantic."""
        if self.future:
            self.in_string.update(id(child) for child in ast.walk(annotation))
        self.expr(annotation, "type")

    @staticmethod
    def _check_name(node: ast.AST, name: str) -> None:
        if name.startswith("_"):
            raise _refuse(node, f"names starting with an underscore ({name!r}) are not allowed")

    def _shadowed(self, node: ast.AST, name: str) -> None:
        """Refuse ``name`` where it is looked up in a class body (or in a model's namespace,
        inside a string) that binds it."""
        if id(node) in self.in_string and (name in self.class_bound or name in PYDANTIC_BINDS):
            binding = self.class_bound.get(name)
            raise _refuse(node, shadowing(name, binding, in_string=True))
        if name in self.scope:
            raise _refuse(node, shadowing(name, self.scope[name], in_string=False))

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
            self._shadowed(node, node.id)
            if node.id not in self.names:
                raise _refuse(node, f"the name {node.id!r} is not defined or not allowed here")
            self._not_a_module(node, node.id, self.imported.get(node.id))
            if ctx == "value" and node.id in self.imported:
                self._not_a_function(node, node.id, self.imported[node.id])
            return []
        if isinstance(node, ast.Attribute):
            return self._attribute(node, ctx)
        if isinstance(node, ast.Subscript):
            return self._subscript(node, ctx)
        if isinstance(node, ast.Tuple | ast.List):
            return [(e, ctx) for e in node.elts]
        if isinstance(node, ast.Dict):
            if ctx == "type":  # pydantic takes a dict in a type for a core schema (with callables)
                raise _refuse(node, "a dict is not a type (pydantic takes it for a core schema)")
            for key, value in zip(node.keys, node.values, strict=True):
                if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                    raise _refuse(node, "dictionary keys must be strings")
                if key.value in CALLED:  # a model_config dict, or one given to ConfigDict
                    self._called(key.value, value)
            return [(v, "value") for v in node.values]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return [(node.left, ctx), (node.right, ctx)]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            if isinstance(node.operand, ast.Constant) and type(node.operand.value) in (int, float):
                return [(node.operand, ctx)]
        if isinstance(node, ast.Call):
            return self._call(node)
        raise _refuse(node, f"{_describe(node)} is not allowed here")

    def _attribute(self, node: ast.Attribute, ctx: Context) -> list[tuple[ast.AST, Context]]:
        self._check_name(node, node.attr)
        if not isinstance(node.value, ast.Name | ast.Attribute):
            raise _refuse(node, "attributes are allowed only on names")
        chain = _chain(node)
        if chain is not None and chain[0] in self.defined and ctx == "type":
            # what a class body bound (a string, a list...) would become the type, unchecked
            shown = ".".join(chain)
            raise _refuse(
                node,
                f"{shown} is not a type: it is an attribute of {chain[0]!r}, which the source "
                f"defines (for an enum member, write Literal[{shown}])",
            )
        if chain is None or chain[0] not in self.imported:
            if ctx == "value" and self._real(node) is not _UNKNOWN:  # str.lower, int.from_bytes
                self._not_a_function(node, ".".join(chain or []), self._real(node))
            return [(node.value, ctx)]
        for part in chain:
            self._check_name(node, part)
        value = self._resolve(node)
        self._not_a_module(node, ".".join(chain), value)
        if ctx == "value":
            self._not_a_function(node, ".".join(chain), value)
        return []

    @staticmethod
    def _not_a_module(node: ast.AST, shown: str, value: object) -> None:
        if isinstance(value, types.ModuleType):  # a module held as a value escapes ``follow``
            raise _refuse(node, f"the module {shown!r} may only be used as {shown}.Name")

    @staticmethod
    def _not_a_function(node: ast.AST, shown: str, value: object) -> None:
        if is_function(value) and not is_pure(value):
            raise _refuse(
                node,
                f"{shown} is the function {describe(value)}: pydantic may call a function found "
                "among a model's values (as a method of the class, a default factory, an alias "
                f"generator...), and a source may use only these pure ones: {pure_names()}",
            )

    def _real(self, node: ast.expr) -> object:
        """What a name or attribute chain is on the real objects, when it starts from an imported
        name or a builtin type the source does not rebind; ``_UNKNOWN`` otherwise.

        Raises:
            SourceRefused: the chain leaves the allowed modules, or does not exist.
        """
        chain = [node.id] if isinstance(node, ast.Name) else None
        if isinstance(node, ast.Attribute):
            chain = _chain(node)
        if not chain or any(part.startswith("_") for part in chain):
            return _UNKNOWN
        self._shadowed(node, chain[0])  # a class body's binding: refused as such
        if chain[0] in self.imported:
            return self._resolve(node)
        if chain[0] not in BUILTIN_TYPES or chain[0] in self.defined or chain[0] in self.scope:
            return _UNKNOWN
        try:
            return follow(getattr(builtins, chain[0]), chain[1:], chain[0])
        except Unreachable as error:
            raise _refuse(node, str(error)) from None

    def _called(self, key: str, node: ast.expr) -> None:
        """Refuse what pydantic would call as ``key`` (an alias generator, a default factory...)
        unless it is one of the pure functions or a class the source defines.

        Raises:
            SourceRefused: at ``node``, naming what it is and why.
        """
        if isinstance(node, ast.Constant) and node.value is None:
            return
        if isinstance(node, ast.Dict) and key in DATA_TOO | ENCODERS:
            for item in node.values if key in ENCODERS else []:
                self._called(key, item)
            return  # json_schema_extra's data: checked as values
        target = node.value if isinstance(node, ast.Subscript) else node  # list[int], Page[Item]
        if isinstance(target, ast.Name) and target.id in self.classes:
            return
        only = f"a source may pass only {pure_names()}, or a class it defines"
        if isinstance(target, ast.Name | ast.Attribute):
            value = self._real(target)
            if value is not _UNKNOWN and is_pure(value):
                return
            written = ast.unparse(target)
            real = describe(value) if value is not _UNKNOWN else written
            what = written if real == written else f"{written} ({real})"
            raise _refuse(node, f"{key}: pydantic calls {what}, which is not pure: {only}")
        if not isinstance(node, _REFUSED_ANYWAY):
            raise _refuse(
                node, f"{key}: pydantic calls it, and {_describe(node)} is not a function: {only}"
            )

    def _resolve(self, node: ast.AST) -> object:
        """What an imported name, or an attribute chain from one, is on the real objects; None
        for anything else (what the source defines, or a name that the check refuses anyway).

        Raises:
            SourceRefused: the chain leaves the allowed modules.
        """
        chain = [node.id] if isinstance(node, ast.Name) else None
        if isinstance(node, ast.Attribute):
            chain = _chain(node)
        if chain:
            self._shadowed(node, chain[0])
        if not chain or chain[0] not in self.imported or any(p.startswith("_") for p in chain):
            return None
        try:
            return follow(self.imported[chain[0]], chain[1:], chain[0])
        except Unreachable as error:
            raise _refuse(node, str(error)) from None

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
            return [(self._forward_reference(node, value), "type")]
        return []

    def _forward_reference(self, node: ast.Constant, value: str) -> ast.expr:
        """The expression a string annotation holds, which typing compiles as it is (no strip)
        and pydantic evaluates later: its nodes are marked as being in a string."""
        shown = f"the string annotation {_shown(value)}"
        if id(node) in self.in_string:
            hint = "write the type inside without quotes"
            if self.future:
                hint = "with from __future__ import annotations every annotation is a string: "
                hint += "write it without quotes"
            raise _refuse(node, f"{shown} is inside another string annotation: {hint}")
        if len(value) > MAX_ANNOTATION:
            raise _refuse(node, f"{shown} is longer than {MAX_ANNOTATION} characters")
        if not value.isprintable():
            raise _refuse(node, f"{shown} holds a line break or control character")
        scan_expression(value, node, shown)
        try:
            parsed = parse_expression(value)
        except SyntaxError:
            raise _refuse(node, f"{shown} is not an expression") from None
        except (RecursionError, MemoryError, ValueError):  # the parser's own limits
            raise _refuse(node, f"{shown} nests too deep to be checked") from None
        for child in ast.walk(parsed):
            ast.copy_location(child, node)
            self.in_string.add(id(child))
        self._parsed.append(parsed)
        return parsed.body

    def _subscript(self, node: ast.Subscript, ctx: Context) -> list[tuple[ast.AST, Context]]:
        base = node.value
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        form = special_form(self._resolve(base))
        if form == "Literal":
            return [(base, ctx), *((i, "value") for i in items)]
        if form == "Annotated" and items:
            return [(base, ctx), (items[0], "type"), *((i, "value") for i in items[1:])]
        # typing turns the strings in any other subscript into forward references
        return [(base, ctx), *((i, "type") for i in items)]

    def _call(self, node: ast.Call) -> list[tuple[ast.AST, Context]]:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name not in ALLOWED_CALLS:
            shown = name or _describe(func)
            raise _refuse(
                node, f"calling {shown} is not allowed (only {', '.join(sorted(ALLOWED_CALLS))})"
            )
        if allowed_call(self._resolve(func)) != name:  # an allowed name bound to something else
            raise _refuse(
                node,
                f"calling {name} is not allowed: it is not the {name} imported "
                "from pydantic, annotated_types, enum or typing",
            )
        if name == "ConfigDict" and node.args:  # a dict or pairs would hide the keys
            raise _refuse(node.args[0], "ConfigDict takes its settings as keywords only")
        children: list[tuple[ast.AST, Context]] = [(func, "callee")]
        for position, arg in enumerate(node.args):
            if isinstance(arg, ast.Starred):
                raise _refuse(arg, "*args are not allowed")
            typed = is_type_argument(name, position=position)
            children.append((arg, "type" if typed else "value"))
        for keyword in node.keywords:
            if keyword.arg is None:
                raise _refuse(keyword.value, "**kwargs are not allowed")
            self._check_name(keyword.value, keyword.arg)
            if keyword.arg in CALLED and name in ("Field", "ConfigDict"):
                self._called(keyword.arg, keyword.value)
            typed = is_type_argument(name, keyword=keyword.arg)
            children.append((keyword.value, "type" if typed else "value"))
        return children


def _lookup(node: ast.AST, module: str, names: list[str] | None = None) -> object:
    try:
        return imported(module, names or [])
    except Unreachable as error:
        raise _refuse(node, str(error)) from None


def _chain(node: ast.Attribute) -> list[str] | None:
    """``a.b.c`` as ``["a", "b", "c"]``; None when it does not start from a name."""
    parts: list[str] = []
    current: ast.expr = node
    while isinstance(current, ast.Attribute):
        parts.append(current.attr)
        current = current.value
    return [current.id, *reversed(parts)] if isinstance(current, ast.Name) else None


def _shown(value: str) -> str:
    return repr(value) if len(value) <= 60 else f"{value[:60]!r}..."


def _describe(node: ast.AST) -> str:
    names = {
        ast.Lambda: "a lambda", ast.BinOp: "arithmetic", ast.BoolOp: "a boolean operation",
        ast.Compare: "a comparison", ast.ListComp: "a comprehension",
        ast.SetComp: "a comprehension", ast.DictComp: "a comprehension",
        ast.GeneratorExp: "a generator", ast.Await: "await",
        ast.Yield: "yield", ast.YieldFrom: "yield", ast.IfExp: "a conditional expression",
        ast.NamedExpr: "an assignment expression", ast.Starred: "unpacking",
        ast.JoinedStr: "an f-string", ast.Set: "a set literal", ast.Slice: "a slice",
        ast.Call: "a call", ast.Constant: "a constant", ast.List: "a list", ast.Tuple: "a tuple",
        ast.Dict: "a dict",
    }  # fmt: skip
    return names.get(type(node), type(node).__name__)


@dataclass(frozen=True, slots=True)
class CheckedSource:
    """A source that passed the check: the text to run (methods removed) and what was removed.

    Attributes:
        source: the source with every method of a class (validators included, decorators and
            all) replaced by ``pass`` and blank lines, so that line numbers stay the same.
        stripped: the methods removed, e.g. ``"Answer.check_reason (@field_validator)"``.
    """

    source: str
    stripped: tuple[str, ...] = ()


def _parse(source: str) -> ast.Module:
    try:
        return parse_module(source, filename="<schema>")
    except SyntaxError as error:
        raise SourceRefused(
            f"syntax error: {error.msg}", line=error.lineno, column=error.offset
        ) from None
    except (RecursionError, MemoryError) as error:
        why = "it nests too deeply" if isinstance(error, RecursionError) else "it is too large"
        raise SourceRefused(f"the source cannot be parsed: {why}") from None
    except ValueError as error:  # e.g. "source code string cannot contain null bytes"
        raise SourceRefused(f"the source cannot be parsed: {error}") from None


def _methods(tree: ast.Module) -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    return [
        (node.name, item)
        for node in tree.body
        if isinstance(node, ast.ClassDef)
        for item in node.body
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
    ]


def _describe_method(owner: str, node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    decorators = [
        ast.unparse(d.func if isinstance(d, ast.Call) else d) for d in node.decorator_list
    ]
    kind = ", ".join(f"@{d}"[:60] for d in decorators) or "a method"
    return f"{owner}.{node.name} ({kind})"


def _strip_methods(source: str, tree: ast.Module) -> CheckedSource:
    """Methods do not change the JSON Schema: remove them (their lines become blank) rather than
    refuse the source. What remains is checked as a whole afterwards, like any source."""
    methods = _methods(tree)
    if not methods:
        return CheckedSource(source)
    lines = source.splitlines(keepends=True)
    for _, node in methods:
        first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        assert node.end_lineno is not None
        indent = " " * node.col_offset
        lines[first - 1] = f"{indent}pass\n"
        for number in range(first, node.end_lineno):
            lines[number] = "\n"
    stripped = tuple(_describe_method(owner, node) for owner, node in methods)
    return CheckedSource("".join(lines), stripped)


def check_source(source: str) -> CheckedSource:
    """Refuse a Pydantic source that is too big, too nested, or uses a construct not allowed;
    the methods of its classes (validators...) are removed, not refused.

    Returns:
        The source to run, with its methods removed, and their names.

    Raises:
        SourceRefused: with the line, the column and the construct.
    """
    scan(source)
    checked = _strip_methods(source, _parse(source))
    tree = _parse(checked.source)
    _Checker(tree).module(tree)
    return checked
