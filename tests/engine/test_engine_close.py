"""``Engine.close`` closes what the engine owns (its compile workers, its model's connections)
and only that: a compiler it shares stays open."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator

import pytest

from app.engine import Engine, GrammarCompiler, GrammarKind, GrammarSpec
from app.engine.model.remote.check import ServerFacts
from app.engine.model.remote.client import VllmClient
from app.engine.model.remote.model import RemoteModel
from app.exceptions import GrammarError, MaskscopeError
from app.settings import RemoteEngineSpec, Settings
from tests.conftest import free_port
from tests.engine.toy_forward import ToyModel

REGEX = GrammarSpec(GrammarKind.REGEX, "[ab]+")


def _compiler(model: ToyModel) -> GrammarCompiler:
    return GrammarCompiler(model.tokens.info, workers=1)


@pytest.fixture(scope="module")
def shared() -> Iterator[GrammarCompiler]:
    """A compiler for the toy vocabulary that the engines below share (it starts in seconds)."""
    with _compiler(ToyModel()) as compiler:
        yield compiler


def test_close_stops_its_compile_workers_and_closes_its_model() -> None:
    before = set(multiprocessing.active_children())
    model = ToyModel()
    engine = Engine(model, _compiler(model), Settings())
    assert engine.compile(REGEX).grammar_text
    assert set(multiprocessing.active_children()) - before, "the compiler runs a worker"
    engine.close()
    assert not set(multiprocessing.active_children()) - before
    assert model.closed == 1
    with pytest.raises(GrammarError, match="shut down"):
        engine.compile(GrammarSpec(GrammarKind.REGEX, "[ab]{3}"))
    engine.close()  # a second close does nothing (it used to wait for the workers forever)
    assert model.closed == 1


def test_close_leaves_a_shared_compiler_open(shared: GrammarCompiler) -> None:
    model = ToyModel()
    engine = Engine(model, shared, Settings(), owns_compiler=False)
    engine.close()
    assert model.closed == 1
    assert shared.compile(REGEX).grammar_text  # the other engine's compiler still works


def test_close_closes_a_remote_engine_s_client(shared: GrammarCompiler) -> None:
    toy = ToyModel()
    spec = RemoteEngineSpec(
        id="nowhere", url=f"http://127.0.0.1:{free_port()}/v1", model="m", tokenizer="t"
    )
    client = VllmClient(spec, timeout_s=1.0)
    model = RemoteModel(
        spec=spec,
        client=client,
        facts=ServerFacts(version="0", vocab_size=toy.tokens.vocab_size, logprobs_cap=None),
        tokens=toy.tokens,
        identity=toy.identity,
    )
    engine = Engine(model, shared, Settings(), owns_compiler=False)
    with pytest.raises(MaskscopeError):  # open: it tries, and finds no server
        client.version()
    engine.close()
    with pytest.raises(RuntimeError, match="closed"):  # closed: it does not try
        client.version()
    assert shared.compile(REGEX).grammar_text
