"""``Sandbox.schemas``: every model a request names derived in one sandbox process, each with its
own schema or error, and a run stopped from another thread killed at once."""

from __future__ import annotations

import threading

import pytest

from app.exceptions import PydanticFailed, RequestEnded
from app.sandbox.process import Cancel, Limits
from app.sandbox.sandbox import PydanticSchema, Sandbox
from tests.sandbox.models import SLOW_NAMES, gone, many_models, pydantic_here, slow_models, wait_for


@pytest.fixture()
def sandbox() -> Sandbox:
    return Sandbox(Limits(cpu_s=60, wall_s=120))


def test_every_named_model_is_derived_in_one_process(sandbox: Sandbox) -> None:
    source = many_models(20)
    names = [f"M{k}" for k in range(19, -1, -1)]
    derived = sandbox.schemas(source, [*names, "Nope", "M3"])
    assert sandbox.runs == 1
    expected = pydantic_here(source)
    assert list(derived) == [*names, "Nope"]
    for name in names:
        found = derived[name]
        assert isinstance(found, PydanticSchema), found
        assert found.schema == expected[name]
        assert found.root == name and found.models == tuple(f"M{k}" for k in range(20))
    missing = derived["Nope"]
    assert isinstance(missing, PydanticFailed)
    assert missing.message.startswith("no model named 'Nope'; the source defines M0, M1, M2")


def test_models_derived_once_are_not_derived_again(sandbox: Sandbox) -> None:
    source = many_models(3)
    first = sandbox.schemas(source, ["M0", "M1"])
    again = sandbox.schemas(source, ["M1", "M0", "M2"])
    assert sandbox.runs == 2  # only M2 was derived the second time
    assert again["M0"] == first["M0"] and again["M1"] == first["M1"]
    assert sandbox.schema(source, "M2") == again["M2"] and sandbox.runs == 2


def test_a_model_that_fails_is_its_own_entry_and_the_others_are_derived(
    sandbox: Sandbox,
) -> None:
    source = (
        "from pydantic import BaseModel, ConfigDict\n\n"
        "class A(BaseModel):\n    model_config = ConfigDict(json_schema_extra=dict)\n"
        "class B(BaseModel):\n    y: int = 0\n"
    )
    derived = sandbox.schemas(source, ["A", "B"])
    failed, fine = derived["A"], derived["B"]
    assert isinstance(failed, PydanticFailed) and failed.message.startswith("ValueError: ")
    assert isinstance(fine, PydanticSchema) and fine.schema["properties"]["y"]["default"] == 0
    assert sandbox.runs == 1


def test_a_source_that_fails_fails_the_run_with_its_line(sandbox: Sandbox) -> None:
    source = "from pydantic import BaseModel, Field\n\nclass A(BaseModel):\n"
    source += "    x: str = Field(..., pattern='[')\n"
    with pytest.raises(PydanticFailed) as caught:
        sandbox.schemas(source, ["A"])
    assert caught.value.message.startswith("SchemaError") and caught.value.line == 3


def test_a_run_cancelled_from_another_thread_is_killed_at_once(sandbox: Sandbox) -> None:
    cancel = Cancel()
    outcome: list[BaseException] = []

    def derive() -> None:
        try:
            sandbox.schemas(slow_models(), SLOW_NAMES, cancel=cancel)
        except BaseException as error:  # what the run ended with, checked below
            outcome.append(error)

    worker = threading.Thread(target=derive)
    worker.start()
    wait_for(lambda: bool(sandbox.running))
    [pid] = sandbox.running
    cancel.set()
    worker.join(timeout=60)
    assert not worker.is_alive()
    # The run would last seconds more: it ended because it was killed.
    assert [type(e) for e in outcome] == [RequestEnded], outcome
    assert gone(pid) and sandbox.running == () and sandbox.runs == 1


def test_a_run_cancelled_before_it_starts_never_starts(sandbox: Sandbox) -> None:
    cancel = Cancel()
    cancel.set()
    with pytest.raises(RequestEnded):
        sandbox.schemas(many_models(2), ["M0"], cancel=cancel)
    assert sandbox.runs == 0 and sandbox.running == ()
