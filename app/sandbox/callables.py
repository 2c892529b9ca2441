"""What pydantic calls in a Pydantic source, and the few pure functions a source may pass it.

pydantic calls what a source gives it as an alias generator, a default factory, a title
generator, ``json_schema_extra``, ``exclude_if`` or a JSON encoder (the keywords of ``Field`` and
``ConfigDict`` typed ``Callable`` in pydantic's ``fields.py`` and ``config.py``, the same keys in a
``model_config`` dict or as class keywords). An attribute of an imported class reaches any
function of the standard library: ``DirectoryPath.unlink`` is ``pathlib.Path.unlink``, which
pydantic calls with each field's name as an alias generator, i.e. ``os.unlink("name")``. So only
the functions in :func:`pure` may be passed (or a class the source defines), found by what they
are on the real objects, never by the name a source gives them.
"""

from __future__ import annotations

import builtins
import datetime
import inspect
import sys
import types
import uuid

__all__ = ["CALLED", "DATA_TOO", "ENCODERS", "describe", "is_function", "is_pure", "pure_names"]

#: Keywords (of ``Field``, of ``ConfigDict``, of a class statement, keys of a config dict) whose
#: value pydantic calls. ``schema_generator`` is deprecated (ignored since 2.10): still refused.
CALLED = frozenset(
    {
        "default_factory",
        "alias_generator",
        "field_title_generator",
        "model_title_generator",
        "json_schema_extra",
        "exclude_if",
        "json_encoders",
        "schema_generator",
    }
)
#: Of :data:`CALLED`, those that also take data (a dict literal), which pydantic does not call.
DATA_TOO = frozenset({"json_schema_extra"})
#: Of :data:`CALLED`, those that take a dict whose values pydantic calls.
ENCODERS = frozenset({"json_encoders"})

#: Builtin types, as their names in a source (constructors without side effects).
PURE_BUILTINS = ("list", "dict", "set", "frozenset", "tuple", "str", "int", "float", "bool")
#: ``str`` methods: alias generators that only change case or spacing.
PURE_STR_METHODS = ("lower", "upper", "title", "capitalize", "casefold", "swapcase", "strip")
_ALIAS_GENERATORS = ("to_camel", "to_pascal", "to_snake")


def _pure() -> tuple[tuple[object, str], ...]:
    found: list[tuple[object, str]] = [(getattr(builtins, n), n) for n in PURE_BUILTINS]
    found += [(getattr(str, n), f"str.{n}") for n in PURE_STR_METHODS]
    found += [
        (datetime.datetime.now, "datetime.now"),
        (datetime.datetime.utcnow, "datetime.utcnow"),
        (datetime.datetime.today, "datetime.today"),
        (datetime.date.today, "date.today"),
        (uuid.uuid4, "uuid.uuid4"),
    ]
    # Only when loaded: a source may import no module the sandbox has not loaded (``reach``).
    generators = sys.modules.get("pydantic.alias_generators")
    if generators is not None:
        found += [(getattr(generators, n), n) for n in _ALIAS_GENERATORS]
    return tuple(found)


def is_pure(value: object) -> bool:
    """Whether ``value`` is one of the pure functions a source may pass pydantic to call.

    Bound methods of a class (``datetime.now``) are made anew at each look-up: they are compared
    by equality (same function, same class), everything else by identity.
    """
    for known, _ in _pure():
        if value is known:
            return True
        if type(value) is type(known) and isinstance(value, types.BuiltinMethodType):
            if value == known:
                return True
    return False


def pure_names() -> str:
    """The pure functions, as a source may write them, for a message."""
    return ", ".join(name for _, name in _pure())


def is_function(value: object) -> bool:
    """Whether ``value`` is a function or method (what a class body turns into a method and
    pydantic may call), rather than a type, a special form or data."""
    return inspect.isroutine(value) or isinstance(value, classmethod | staticmethod)


def describe(value: object) -> str:
    """What ``value`` is, by its module and qualified name (``pathlib.Path.unlink``)."""
    module = getattr(value, "__module__", None)
    name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
    if module is None and isinstance(value, types.BuiltinMethodType):
        owner = getattr(value, "__self__", None)
        module = getattr(owner, "__module__", None)
    if not isinstance(name, str):
        return type(value).__name__
    return f"{module}.{name}" if isinstance(module, str) and module != "builtins" else name
