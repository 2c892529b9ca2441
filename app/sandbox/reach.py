"""What a name imported by a Pydantic source reaches, looked up on the real modules.

A source may import only from a few modules, but those modules hold others: ``uuid.os``,
``typing.sys``, ``enum.bltns`` (the builtins). An attribute chain through them reaches ``os.fork``
or ``eval``, which pydantic would call as a default factory or an alias generator. The static
check follows every import and every attribute chain rooted at an imported name, on the modules
themselves (the server's own dependencies, imported here without running the source), and
refuses one that leaves the allowed modules. Only modules already loaded are looked at (the
sandbox process loads the same ones before it contains itself): the source imports nothing here.
"""

from __future__ import annotations

import functools
import importlib
import sys
import types
import typing
import warnings
from collections.abc import Sequence

import typing_extensions

__all__ = [
    "ALLOWED_CALLS",
    "ALLOWED_MODULES",
    "Unreachable",
    "allowed_call",
    "follow",
    "imported",
    "is_type_argument",
    "load_allowed",
    "special_form",
]

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


#: What a source may call, each found by what it is, not by the name it was imported as.
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


class Unreachable(Exception):
    """A name or attribute a source may not use, with the reason."""


def _allowed(value: object) -> bool:
    if not isinstance(value, types.ModuleType):
        return True
    return value.__name__.partition(".")[0] in ALLOWED_MODULES


def follow(value: object, attributes: Sequence[str], shown: str) -> object:
    """``value.a.b...``, refusing a step that does not exist or leaves the allowed modules.

    Args:
        value: what the chain starts from (a module or an object imported from one).
        attributes: the attribute names, in order.
        shown: how the source names ``value``, for the message.

    Raises:
        Unreachable: with the chain as written and the reason.
    """
    for attribute in attributes:
        shown = f"{shown}.{attribute}"
        try:
            value = getattr(value, attribute)
        except AttributeError:
            raise Unreachable(f"{shown} does not exist") from None
        if not _allowed(value):
            name = getattr(value, "__name__", "?")
            raise Unreachable(f"{shown} is the module {name!r}, which a source may not use")
    return value


@functools.cache
def load_allowed() -> None:
    """Import the allowed modules and every lazy export of pydantic: all that a source may use.

    The sandbox process does it before it contains itself (it can import nothing afterwards); the
    static check does it once too, then refuses any module that is not loaded by now: a source
    never makes the server import anything, nor names a module the sandbox would not have.
    """
    for name in sorted(ALLOWED_MODULES):
        importlib.import_module(name)
    importlib.import_module("pydantic.alias_generators")  # to_camel etc., pure and allowed
    pydantic = sys.modules["pydantic"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the deprecated names warn when touched
        for name in pydantic.__all__:
            getattr(pydantic, name)


def imported(module: str, names: Sequence[str] = ()) -> object:
    """What ``import module`` (no names) or ``from module import a`` (``names=["a"]``) binds.

    Raises:
        Unreachable: the module is not one the sandbox loads, or the name leaves the allowed
            modules.
    """
    load_allowed()
    value = sys.modules.get(module)
    if value is None or not _allowed(value):
        raise Unreachable(f"the module {module!r} is not available in the sandbox")
    return follow(value, names, module)


@functools.cache
def _callables() -> tuple[tuple[object, str], ...]:
    found = []
    for module in ("pydantic", "annotated_types", "enum", "typing", "typing_extensions"):
        for name in ALLOWED_CALLS:
            value = getattr(importlib.import_module(module), name, None)
            if value is not None:
                found.append((value, name))
    return tuple(found)


def allowed_call(value: object) -> str | None:
    """The name of the allowed callable ``value`` is (``Field``, ``TypeVar``...), or None."""
    return next((name for known, name in _callables() if known is value), None)


def special_form(value: object) -> str | None:
    """``"Literal"`` or ``"Annotated"`` when ``value`` is one (from typing or typing_extensions)."""
    if value is typing.Literal or value is typing_extensions.Literal:
        return "Literal"
    if value is typing.Annotated or value is typing_extensions.Annotated:
        return "Annotated"
    return None


def is_type_argument(
    callee: str, *, position: int | None = None, keyword: str | None = None
) -> bool:
    """Whether this argument of an allowed call is a type, which pydantic or typing evaluates
    when it is a string: a TypeVar's constraints, ``bound`` and ``default``; the item type of
    ``conlist`` and ``conset``."""
    if callee == "TypeVar":
        return (position is not None and position >= 1) or keyword in ("bound", "default")
    if callee in ("conlist", "conset"):
        return position == 0 or keyword == "item_type"
    return False
