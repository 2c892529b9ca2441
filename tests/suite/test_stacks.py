"""A suite under serving stacks, the parts that need no stack running: a ``.request.json`` is a
request source, the cache key names the stack and its versions, and a pointer into the grammar a
stack derived from a request is placed at its line in the request file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.engine.grammars.request import DerivedRequest
from app.suite import CheckOptions
from app.suite.cache import case_key
from app.suite.discovery import Source, discover
from app.suite.kinds import kind_of
from app.suite.stacked import request_locator
from app.vocabulary import GrammarKind

SUITE = Path(__file__).resolve().parent.parent / "fixtures" / "stack_suite"


@pytest.mark.parametrize(
    ("name", "kind"),
    [("labels.request.json", "request"), ("x.tools.json", "tools"), ("x.json", "json_schema")],
)
def test_the_longest_suffix_names_the_kind(name: str, kind: str) -> None:
    assert kind_of(name) == (kind, f".{name.split('.', 1)[1]}")


def test_a_request_file_in_a_suite_is_discovered_as_a_request() -> None:
    kinds = {Path(s.name).name: s.kind for s in discover([str(SUITE)])}
    assert kinds["labels.request.json"] == "request"
    assert kinds["free.tools.json"] == "tools" and kinds["both.json"] == "json_schema"


def test_the_cache_key_differs_per_stack_and_per_stack_versions() -> None:
    source = Source("a.json", "a.json", "json_schema", '{"type": "string"}')
    options = CheckOptions()
    old = {"vllm": "0.32.0", "xgrammar": "0.2.8"}
    keys = {
        case_key(source, "maskscope", "xgrammar", options),
        case_key(source, "vllm-0.32.0", "xgrammar", options, old),
        case_key(source, "vllm-0.34.0", "xgrammar", options, old | {"vllm": "0.34.0"}),
        # the same stack upgraded in place (its xgrammar): checked again, not read back
        case_key(source, "vllm-0.32.0", "xgrammar", options, old | {"xgrammar": "0.2.9"}),
    }
    assert len(keys) == 4
    assert case_key(source, "vllm-0.32.0", "xgrammar", options, dict(old)) in keys


def test_a_pointer_into_the_derived_schema_is_placed_in_the_request_file() -> None:
    text = (SUITE / "labels.request.json").read_text()
    schema = json.loads(text)["body"]["response_format"]["json_schema"]["schema"]
    derived = DerivedRequest(GrammarKind.JSON_SCHEMA, json.dumps(schema, indent=2), "", 0, "s", {})
    locate = request_locator(text, derived)
    line, column = locate("/properties/labels/items/not")  # type: ignore[misc]
    assert text.splitlines()[line - 1][column - 1 :].startswith('"not"')
    assert locate("/nowhere/in/it") is not None  # a part it does not hold: its parent's line


def test_an_engine_under_a_stacks_tools_is_not_kept_once_dropped(tmp_path: Path) -> None:
    # A process (a server, the test run) opens many engines: the stacked one made for a check
    # must not keep the engine it was made from, its tokenizer or its compile worker.
    import gc
    import weakref

    from app.engine.grammars.tools.vllm_builder import VllmBuilder
    from app.engine.mask_summary import summarize_mask
    from app.settings import Settings
    from app.suite.stacked import with_stack_tools
    from tests.web.toy_app import toy_engine

    settings = Settings(stack_runner_dir=tmp_path)
    engine = toy_engine(settings)
    builder = VllmBuilder(settings)  # no runner starts: nothing is built
    assert with_stack_tools(engine, builder) is with_stack_tools(engine, builder)
    summarize_mask(b"\xff" * 4 * ((engine.model.tokens.vocab_size + 31) // 32), engine.model.tokens)
    engine_ref, tokens_ref = weakref.ref(engine), weakref.ref(engine.model.tokens)
    engine.close()
    del engine
    gc.collect()
    assert engine_ref() is None, "the stacked engine kept the engine it was made from"
    assert tokens_ref() is None, "a tokenizer outlived its engine"
