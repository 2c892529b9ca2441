"""The static check: an adversarial corpus refused with line, column and construct."""

from __future__ import annotations

import pytest

from app.exceptions import SourceRefused
from app.sandbox.check import MAX_ANNOTATION, check_source
from tests.sandbox.attacks import BUILTIN_NAMED_FIELDS, SHADOWING, with_future_annotations

HEAD = "from pydantic import BaseModel, Field\n"

# (source, what the refusal must say). Each would do harm, or could, if it ran.
CORPUS = [
    ("import os", "importing 'os' is not allowed"),
    ("import sys", "importing 'sys' is not allowed"),
    ("import subprocess", "importing 'subprocess' is not allowed"),
    ("import socket", "importing 'socket' is not allowed"),
    ("import importlib", "importing 'importlib' is not allowed"),
    ("import builtins", "importing 'builtins' is not allowed"),
    ("from os import system", "importing from 'os' is not allowed"),
    ("from os.path import join", "importing from 'os.path' is not allowed"),
    ("from . import x", "importing from '.' is not allowed"),
    ("from pydantic import *", "import * is not allowed"),
    ("from typing import _SpecialForm", "names starting with an underscore"),
    ("from pydantic import BaseModel as _B", "names starting with an underscore"),
    ('__import__("os")', "calling __import__ is not allowed"),
    ('eval("1")', "calling eval is not allowed"),
    ('exec("x = 1")', "calling exec is not allowed"),
    ('open("/etc/passwd")', "calling open is not allowed"),
    ('print("x")', "calling print is not allowed"),
    ('x = getattr(BaseModel, "schema")', "calling getattr is not allowed"),
    ("x = ().__class__.__mro__", "names starting with an underscore ('__mro__')"),
    ("x = BaseModel.__subclasses__", "names starting with an underscore"),
    ("x = Field().__class__", "names starting with an underscore"),
    ("x = breakpoint", "the name 'breakpoint' is not defined or not allowed"),
    (HEAD + "class A(BaseModel):\n    x: int = getattr(A, 'x')", "calling getattr"),
    (HEAD + "@classmethod\nclass A(BaseModel):\n    x: int", "decorators are not allowed"),
    (
        HEAD + "class A(BaseModel):\n    @classmethod\n    def v(cls, x): return x\nx = eval('1')",
        "calling eval is not allowed",  # a stripped method leaves the rest checked as before
    ),
    (HEAD + "class A(BaseModel, metaclass=type):\n    x: int", "metaclasses"),
    (HEAD + "class A(BaseModel):\n    x: list = list()", "calling list is not allowed"),
    (HEAD + "class A(BaseModel):\n    x: int = 10**10**10", "arithmetic is not allowed"),
    (HEAD + "class A(BaseModel):\n    x: str = 'a' * 10**9", "arithmetic is not allowed"),
    ("x = 'a' * 10**9", "arithmetic is not allowed"),
    ("while True:\n    pass", "loops are not allowed"),
    ("for i in range(9):\n    pass", "loops are not allowed"),
    ("def f():\n    return f()\nf()", "functions and methods"),
    ("x = [i for i in range(10)]", "a comprehension is not allowed"),
    ("x = lambda: 0", "a lambda is not allowed"),
    ("x = (yield)", "yield is not allowed"),
    ("try:\n    pass\nexcept Exception:\n    pass", "try statements are not allowed"),
    ('with open("f", "w") as f:\n    pass', "with statements are not allowed"),
    ("global x", "global statements are not allowed"),
    ("del BaseModel", "del statements are not allowed"),
    ("raise SystemExit", "raise statements are not allowed"),
    ("assert False", "assert statements are not allowed"),
    (HEAD + "class A(BaseModel):\n    class Config:\n        extra = 'forbid'", "nested classes"),
    (HEAD + "class A(BaseModel):\n    x: \"__import__('os').system('id')\"", "calling system"),
    (HEAD + "class A(BaseModel):\n    x: \"__import__('os')\"", "calling __import__"),
    (HEAD + "Field()", "expression statements are not allowed"),
    (HEAD + "class A(BaseModel):\n    x: int = Field(default_factory=lambda: 1)", "a lambda"),
    (
        HEAD + "class A(BaseModel):\n    x: int = Field(json_schema_extra={'a': eval('1')})",
        "calling eval",
    ),
    (HEAD + "class A(BaseModel):\n    x: int = Field(*[1])", "*args are not allowed"),
    (HEAD + "class A(BaseModel):\n    x: int = Field(**{})", "**kwargs are not allowed"),
    ("\uff45\uff56\uff41\uff4c('1')", "look-alike characters"),  # fullwidth "eval"
    ("x = " + "(" * 60 + "1" + ")" * 60, "brackets nested deeper than 40"),
    ("x = " + " | ".join(["int"] * 200), "an expression nested deeper than 64"),
    ('x = f"{BaseModel}"', "an f-string is not allowed"),
    ("x = (y := 1)", "an assignment expression is not allowed"),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import os", "if statements"),
    ("x = 1\0", "NUL character"),
    ("x = 'a" + "b" * 20_000 + "'", "a string longer than 10000 characters"),
    ("x = 123456789012345678901234567890", "an integer larger than"),
    ("class A(:\n    pass", "syntax error"),
    ("x: int = 1\n" * 4000, "more than 3000 lines"),
    ("x = '" + "a" * 70_000 + "'", "a Pydantic source may be 65536"),
    ("from annotated_types import Predicate\nx = Predicate(len)", "calling Predicate"),
    # Strings that pydantic or typing evaluate, wherever they hide
    (
        "from typing import TypeVar\nT = TypeVar('T', bound=\"__import__('os')\")",
        "calling __import__",
    ),
    (
        "from typing import TypeVar\nT = TypeVar('T', \"__import__('os')\", int)",
        "calling __import__",
    ),
    (
        "from typing_extensions import TypeVar\nT = TypeVar('T', default=\"__import__('os')\")",
        "calling __import__",
    ),
    (
        HEAD + "from pydantic import conlist\nclass A(BaseModel):\n    x: conlist(\"eval('1')\")",
        "calling eval",
    ),
    (
        HEAD + "from typing import Optional\nclass A(BaseModel):\n"
        "    x: int = Field(default=Optional[\"eval('1')\"])",
        "calling eval",
    ),
    (HEAD + "class A(BaseModel):\n    x: {'type': 'any'}", "a dict is not a type"),
    ("X = {'type': 'function-plain'}", "a dict is not a type"),
    # An allowed name bound to something else
    (
        HEAD.replace("Field", "Field as Literal") + "class A(BaseModel):\n    x: Literal['os.x']",
        "not defined",
    ),
    (
        "from typing import TypeVar as Field\nT = Field('T', bound='int')",
        "it is not the Field imported",
    ),
    (
        "from pydantic import BaseModel\nclass Field(BaseModel):\n    x: int = Field()",
        "it is not the Field",
    ),
    # Modules reached through allowed ones
    (
        HEAD + "import uuid\nclass A(BaseModel):\n    x: int = Field(default_factory=uuid.os.fork)",
        "uuid.os is the module 'os'",
    ),
    (
        HEAD
        + "import enum\nclass A(BaseModel):\n    x: str = Field(default_factory=enum.bltns.input)",
        "the module 'builtins'",
    ),
    ("from uuid import os", "uuid.os is the module 'os', which a source may not use"),
    ("import typing\nX = typing", "the module 'typing' may only be used as typing.Name"),
    (
        HEAD + "import typing\nclass A(BaseModel):\n    m = typing",
        "may only be used as typing.Name",
    ),
    ("from pydantic._internal._validators import import_string", "underscore ('_internal')"),
    ("import uuid\nclass uuid:\n    pass", "the name 'uuid' is both imported and defined"),
    ("from pydantic import NoSuchThing", "pydantic.NoSuchThing does not exist"),
    (
        "from pydantic.mypy import plugin",
        "the module 'pydantic.mypy' is not available in the sandbox",
    ),
]


def test_the_corpus_is_large_enough() -> None:
    assert len(CORPUS) >= 40


@pytest.mark.parametrize(("source", "said"), CORPUS, ids=[str(i) for i in range(len(CORPUS))])
def test_each_adversarial_source_is_refused_clearly(source: str, said: str) -> None:
    with pytest.raises(SourceRefused) as caught:
        check_source(source)
    assert said in caught.value.message


def test_a_refusal_names_line_and_column() -> None:
    with pytest.raises(SourceRefused) as caught:
        check_source(HEAD + "class A(BaseModel):\n    x: int = eval('1')")
    assert (caught.value.line, caught.value.column) == (3, 14)
    assert caught.value.message.startswith("line 3, column 14: calling eval is not allowed")


@pytest.mark.parametrize("name", ["pricing", "router", "candidate", "risk", "nested"])
def test_the_examples_pass(name: str) -> None:
    from app.examples import EXAMPLES_DIR

    check_source((EXAMPLES_DIR / f"{name}.py").read_text())


def test_what_schema_guided_reasoning_uses_passes() -> None:
    check_source(
        '"""Doc."""\n'
        "from enum import Enum\n"
        "from typing import Annotated, Literal, Optional, Union\n"
        "import datetime\n"
        "from pydantic import BaseModel, ConfigDict, Field, conint, StringConstraints\n"
        "from annotated_types import Ge, Le, MinLen, MaxLen\n"
        "Severity = Literal['low', 'high']\n"
        "class Color(str, Enum):\n    red = 'red'\n    blue = 'blue'\n"
        "class Step(BaseModel):\n"
        "    model_config = ConfigDict(extra='forbid')\n"
        "    '''A step.'''\n"
        "    kind: Literal['a', 'b'] = 'a'\n"
        "    score: Annotated[int, Ge(1), Le(10)]\n"
        "    items: Annotated[list['Step'], MinLen(0), MaxLen(3)] = []\n"
        "    code: Annotated[str, StringConstraints(pattern=r'^[A-Z]+$')] = 'A'\n"
        "    n: conint(ge=-5, le=5) = -1\n"
        "    when: Optional[datetime.date] = None\n"
        "    color: Color = Color.red\n"
        "    either: Union[int, str] = Field(0, description='x', json_schema_extra={'k': [1]})\n"
        "    sev: Severity\n"
    )


@pytest.mark.parametrize(
    "source",
    [
        HEAD + "from typing import TypeVar, Generic\nclass A(BaseModel):\n    x: int = 0\n"
        "T = TypeVar('T', bound='A')\nclass Box(BaseModel, Generic[T]):\n    v: T\n"
        "class B(BaseModel):\n    b: Box[A]\n    c: 'Box[A] | None' = None",
        HEAD + "from pydantic import AnyUrl, IPvAnyAddress, SecretStr, Json, conlist\n"
        "class A(BaseModel):\n    u: AnyUrl\n    i: IPvAnyAddress\n    s: SecretStr\n"
        "    j: Json[list[int]]\n    n: conlist('int', min_length=1)",
        "import typing, datetime, pydantic.networks\nfrom pydantic import BaseModel, Field\n"
        "class A(BaseModel):\n    k: typing.Literal['a b', 'import os']\n"
        "    d: typing.Annotated[int, 'not a type', Field(ge=0)]\n"
        "    u: pydantic.networks.AnyUrl\n"
        "    t: datetime.datetime = Field(default_factory=datetime.datetime.now)",
    ],
    ids=["generic", "lazy-exports", "module-attributes"],
)
def test_what_a_schema_needs_still_passes(source: str) -> None:
    check_source(source)


VALIDATED = (
    "from pydantic import BaseModel, Field, field_validator\n"
    "class Answer(BaseModel):\n"
    "    reason: str = Field(max_length=80)\n"
    "    @field_validator('reason')\n"
    "    @classmethod\n"
    "    def check_reason(cls, value: str) -> str:\n"
    "        import os\n"
    "        return os.getcwd()\n"
    "    def describe(self) -> str:\n"
    "        return eval('1')\n"
    "class Empty(BaseModel):\n"
    "    def only(self) -> None:\n"
    "        pass\n"
)


def test_methods_and_validators_are_stripped_and_named_not_refused() -> None:
    checked = check_source(VALIDATED)
    assert checked.stripped == (
        "Answer.check_reason (@field_validator, @classmethod)",
        "Answer.describe (a method)",
        "Empty.only (a method)",
    )
    assert "import os" not in checked.source and "eval" not in checked.source
    assert checked.source.count("\n") == VALIDATED.count("\n")  # lines keep their numbers
    assert checked.source.splitlines()[2] == "    reason: str = Field(max_length=80)"
    assert check_source(checked.source).stripped == ()  # what runs passes the check by itself


def test_a_source_without_methods_runs_as_written() -> None:
    source = HEAD + "class A(BaseModel):\n    x: int\n"
    assert check_source(source).source == source


def test_functions_outside_classes_are_still_refused() -> None:
    with pytest.raises(SourceRefused) as caught:
        check_source(HEAD + "def f():\n    pass\n")
    assert "functions and methods" in caught.value.message


# ---- Names resolved as Python and pydantic will: class scope first (issue #27, item 1) ----


@pytest.mark.parametrize(
    ("source", "said", "line"), [s[1:] for s in SHADOWING], ids=[s[0] for s in SHADOWING]
)
def test_a_name_that_a_class_body_shadows_is_refused_with_its_line(
    source: str, said: str, line: int
) -> None:
    with pytest.raises(SourceRefused) as caught:
        check_source(source)
    assert caught.value.line == line
    assert caught.value.message.startswith(f"line {line}, column ")
    assert said in caught.value.message


SHADOWED = HEAD + "from typing import Any, ForwardRef, List, Literal\n"

# (source, what the refusal must say, its line): uses that pass for harmless, or are not yet
# harmful, but mean a class attribute where the source seems to mean the module's name.
SHADOWED_CORPUS = [
    (
        SHADOWED + "class A(BaseModel):\n    type: str = 'x'\n    b: type\n",
        "class A binds 'type' in its body (line 4)",
        5,
    ),
    (
        "from datetime import date\nfrom pydantic import BaseModel\n"
        "class A(BaseModel):\n    date: date = None\n",  # the value is bound before `date` is read
        "class A binds 'date' in its body (line 4)",
        4,
    ),
    (
        SHADOWED + "class A(BaseModel):\n    min: int = 0\n    b: int = Field(ge=min)\n",
        "the name 'min' is looked up in the class body first",
        5,
    ),
    (
        SHADOWED + "class A(BaseModel):\n    Field: Any = ForwardRef\n    a: int = Field('x')\n",
        "the name 'Field' is looked up in the class body first",
        5,
    ),
    (
        SHADOWED + "class A(BaseModel):\n    f: Any = ForwardRef\n"
        "    a: int = Field(default_factory=f)\n",
        "class A binds 'f' in its body (line 4)",
        5,
    ),
    (
        SHADOWED + "import typing\nclass A(BaseModel):\n    typing: Any = int\n"
        "    a: typing.Literal['x']\n",
        "class A binds 'typing' in its body (line 5)",
        6,
    ),
    (
        SHADOWED
        + "from typing import Annotated\nclass A(BaseModel):\n    Field: Any = ForwardRef\n"
        "    a: Annotated[int, Field('x')]\n",
        "class A binds 'Field' in its body (line 5)",
        6,
    ),
    (
        # another class's binding, in a string: pydantic evaluates strings in whichever model it
        # is building, so any class body counts
        SHADOWED + "class A(BaseModel):\n    Literal: Any = List\n"
        "class B(BaseModel):\n    b: \"Literal['x']\"\n",
        "class A binds 'Literal' in its body (line 4)",
        6,
    ),
    (
        SHADOWED + "class A(BaseModel):\n    x: 'model_config'\n",
        "pydantic binds 'model_config' in every model's namespace",
        4,
    ),
    (
        "from enum import Enum\nclass E(Enum):\n    a = 1\n    b = a\n",
        "class E binds 'a' in its body (line 3)",
        4,
    ),
]


@pytest.mark.parametrize(
    ("source", "said", "line"), SHADOWED_CORPUS, ids=[str(i) for i in range(len(SHADOWED_CORPUS))]
)
def test_a_class_attribute_used_as_a_name_in_its_class_is_refused(
    source: str, said: str, line: int
) -> None:
    with pytest.raises(SourceRefused) as caught:
        check_source(source)
    assert said in caught.value.message
    assert caught.value.line == line


def test_fields_named_like_builtins_stay_legal_with_and_without_the_future_import() -> None:
    check_source(BUILTIN_NAMED_FIELDS)
    check_source(with_future_annotations(BUILTIN_NAMED_FIELDS))


STRING = HEAD + "class A(BaseModel):\n    x: "

# (the string annotation, what the refusal must say): strings the check cannot prove harmless
STRANGE_STRINGS = [
    ("list['int']", "is inside another string annotation: write the type inside without quotes"),
    ("Optional['A']", "is inside another string annotation"),
    ("int | " * 400 + "int", f"is longer than {MAX_ANNOTATION} characters"),
    ("-" * 9000 + "1", f"is longer than {MAX_ANNOTATION} characters"),  # a MemoryError to parse
    ("int." + "a." * 4900 + "b", "is longer than"),  # a RecursionError to parse
    ("list[" * 45 + "int" + "]" * 45, "brackets nested deeper than 40"),
    ("list[\n int]", "holds a line break or control character"),
    ("int\x00", "holds a line break or control character"),
    ("\uff49\uff4e\uff54", "uses look-alike characters ('int')"),  # fullwidth "int"
    (" int", "is not an expression"),  # typing compiles it as it is: an IndentationError
    ("*int", "is not an expression"),
    ("int)", "is not an expression"),
]


@pytest.mark.parametrize(
    ("text", "said"), STRANGE_STRINGS, ids=[str(i) for i in range(len(STRANGE_STRINGS))]
)
def test_a_string_annotation_that_cannot_be_proved_harmless_is_refused_clearly(
    text: str, said: str
) -> None:
    with pytest.raises(SourceRefused) as caught:
        check_source(STRING + repr(text) + "\n")
    assert said in caught.value.message
    assert caught.value.message.startswith("line 3, column 8: the string annotation ")
    assert len(caught.value.message) < 300  # the string is shown cut short


@pytest.mark.parametrize(
    ("source", "said"),
    [
        ("from __future__ import barry_as_FLUFL", "only 'import annotations' (without 'as')"),
        ("from __future__ import annotations as a", "only 'import annotations' (without 'as')"),
        ("from __future__ import annotations, division", "only 'import annotations'"),
        (HEAD + "from __future__ import annotations", "from __future__ imports must come first"),
        ("import __future__", "importing '__future__' is not allowed"),
        (
            "from __future__ import annotations\n" + HEAD + "class A(BaseModel):\n    x: 'int'\n",
            "with from __future__ import annotations every annotation is a string: write it",
        ),
        (
            "from __future__ import annotations\n" + HEAD + "class A(BaseModel):\n"
            "    x: list[eval('1')]\n",
            "calling eval is not allowed",
        ),
    ],
)
def test_the_future_import_is_refused_where_it_is_not_what_the_check_reads(
    source: str, said: str
) -> None:
    with pytest.raises(SourceRefused) as caught:
        check_source(source)
    assert said in caught.value.message


def test_the_future_import_is_accepted_after_a_docstring() -> None:
    source = (
        '"""Doc."""\nfrom __future__ import annotations\n' + HEAD + "from typing import Literal\n"
        "class A(BaseModel):\n    x: list[A] = []\n    k: Literal['a', 'b'] = 'a'\n"
        "    n: int = Field(0, ge=0)\n"
    )
    assert check_source(source).source == source


def test_a_string_annotation_without_shadowing_still_passes() -> None:
    check_source(
        HEAD + "from typing import Literal\nclass A(BaseModel):\n    x: 'list[A] | None'\n"
        "    y: list['A'] = []\n    k: \"Literal['a b', 'import os']\" = 'a b'\n"
    )


def test_an_enum_member_stays_usable_as_a_value_not_as_a_type() -> None:
    source = (
        "from enum import Enum\nfrom typing import Literal\nfrom pydantic import BaseModel\n"
        "class Color(str, Enum):\n    red = 'red'\n    blue = 'blue'\n"
        "class A(BaseModel):\n    c: Color = Color.red\n"
        "    only: Literal[Color.blue] = Color.blue\n"
    )
    check_source(source)
    with pytest.raises(SourceRefused) as caught:
        check_source(source + "    wrong: Color.red\n")
    assert caught.value.message == (
        "line 10, column 12: Color.red is not a type: it is an attribute of 'Color', which the "
        "source defines (for an enum member, write Literal[Color.red])"
    )
