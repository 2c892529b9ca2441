"""The Doctor's verdict does not depend on load: real BFCL tool definitions
(``tests/fixtures/bfcl/``) on Qwen3.6's shipped tokenizer through vLLM's own ``hermes`` builder
(``required``, strict), examined over HTTP in the Doctor's worker processes, give the same
report with every core busy as idle, and never ``grammar_too_complex``; a cold worker's first
examination is its warm answer, and no worker builds a tag (or loads a tokenizer) of its own;
a part its safety stop cuts says ``cut_short_by_load``."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.doctor import DEFAULT_BUDGET_MS, Doctor
from app.doctor.safety import Deadline
from app.doctor.witnesses import search
from app.doctor.worker import DoctorWorkers, Stop
from app.engine import AnyEngine, Engine, GrammarKind, GrammarSpec
from app.main import create_app
from app.settings import Settings
from tests.conftest import as_page
from tests.doctor.bfcl import BfclEntry, entries, tools_source

MODEL = "qwen3.6"
_LOAD_S = 600.0
_TIMES = ("ms", "compile_ms", "compile_ms_any_whitespace")
#: A process that keeps one core busy, for at most this long (killed before, at the end).
_BURN = "import time\nend = time.monotonic() + 900\nwhile time.monotonic() < end:\n    pass\n"


def spread() -> list[BfclEntry]:
    """Six tool sets: the first of one to five parameters each, and one more of five."""
    by_count: dict[int, list[BfclEntry]] = {}
    for entry in entries():
        by_count.setdefault(len(entry.tool["function"]["parameters"]["properties"]), []).append(
            entry
        )
    return [by_count[n][0] for n in range(1, 6)] + [by_count[5][1]]


SETS = spread()


def timeless(value: Any) -> Any:
    """An answer with its times left out (they are the machine's, not the answer's)."""
    if isinstance(value, dict):
        return {k: timeless(v) for k, v in value.items() if k not in _TIMES}
    if isinstance(value, list):
        return [timeless(v) for v in value]
    return value


@contextmanager
def every_core_busy() -> Iterator[list[subprocess.Popen[bytes]]]:
    """One CPU-burning process per core for the block (bounded in time, killed after it)."""
    burners = [subprocess.Popen([sys.executable, "-c", _BURN]) for _ in range(os.cpu_count() or 1)]
    try:
        yield burners
    finally:
        for burner in burners:
            burner.kill()
        for burner in burners:
            burner.wait(timeout=60)


def body(entry: BfclEntry, **extra: Any) -> dict[str, Any]:
    return {"grammar": {"kind": "tools", "source": tools_source(entry)}, "model": MODEL, **extra}


@pytest.fixture(scope="module")
def client(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """An app whose Qwen3.6 tokenizer is loaded (its first load is the model's, not the
    Doctor's)."""
    settings = Settings(db_path=tmp_path_factory.mktemp("doctor-load") / "p.db")
    with TestClient(create_app(settings, engine=engine)) as test_client:
        deadline = time.monotonic() + _LOAD_S
        while test_client.get(f"/api/vocab?model={MODEL}").status_code == 503:
            assert time.monotonic() < deadline, "Qwen3.6's tokenizer did not load"
            time.sleep(0.5)
        yield as_page(test_client)


@pytest.fixture(scope="module")
def idle(client: TestClient) -> dict[str, dict[str, Any]]:
    """Each tool set's answer with the machine as it is; the first also starts vLLM's runner
    and the Doctor's workers (cold)."""
    answers = {}
    for entry in SETS:
        response = client.post("/api/doctor", json=body(entry))
        assert response.status_code == 200, (entry.id, response.text)
        answers[entry.id] = response.json()
    return answers


def test_each_tool_sets_arguments_are_examined_to_the_end(idle: dict[str, dict[str, Any]]) -> None:
    for entry in SETS:
        answer = idle[entry.id]
        names = set(entry.tool["function"]["parameters"]["properties"])
        typed = {k["pointer"].rsplit("/", 2)[-2] for k in answer["keywords"]
                 if k["keyword"] == "type" and "/properties/" in k["pointer"]}  # fmt: skip
        assert typed == names, (entry.id, answer["keywords"])
        assert all(k["status"] != "unchecked" for k in answer["keywords"]), entry.id
        assert not answer["search"]["cut_short"] and not answer["enforcement"]["cut_short"]


def test_with_every_core_busy_the_answers_are_the_idle_ones(
    client: TestClient, idle: dict[str, dict[str, Any]]
) -> None:
    with every_core_busy() as burners:
        loaded = {e.id: client.post("/api/doctor", json=body(e)) for e in SETS}
        assert all(burner.poll() is None for burner in burners), "the load stopped early"
    codes = {name: (r.status_code, r.json().get("error", {}).get("code")) for name, r in
             loaded.items()}  # fmt: skip
    assert codes == {e.id: (200, None) for e in SETS}
    assert {n: timeless(r.json()) for n, r in loaded.items()} == {
        n: timeless(a) for n, a in idle.items()
    }


def qwen(client: TestClient) -> AnyEngine:
    engine: AnyEngine = client.app.state.maskscope.engine_for(MODEL)  # type: ignore[attr-defined]
    return engine


def children(pid: int) -> list[str]:
    """The command lines of ``pid``'s child processes."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                found.append((stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
    return found


def test_a_cold_workers_first_examination_is_its_warm_answer(
    client: TestClient, idle: dict[str, dict[str, Any]]
) -> None:
    """A new worker's first examination pays no start-up and no first load: the same answer as
    once it is warm, and as the app's own warm workers gave; it starts no builder of its own."""
    entry = SETS[-1]
    spec = GrammarSpec(GrammarKind.TOOLS, tools_source(entry))
    workers = DoctorWorkers(qwen(client), Settings())
    try:
        answers = []
        for _ in range(2):  # cold, then warm
            stop = Stop()
            report = workers.examine(spec, seed=0, budget_ms=DEFAULT_BUDGET_MS, pydantic=None,
                                     max_tokens=None, stop=stop)  # fmt: skip
            answers.append(timeless(report.to_dict()))
            assert stop.pid is not None
            assert not [c for c in children(stop.pid) if "vllm" in c], children(stop.pid)
    finally:
        workers.close()
    assert answers[0] == answers[1] == timeless(idle[entry.id])


def test_the_same_seed_gives_the_same_witnesses_busy_or_idle(client: TestClient) -> None:
    """A tool whose parameters have a keyword xgrammar ignores (witnesses to find), seed 7."""
    entry = SETS[0]
    tool = json.loads(json.dumps(entry.tool))
    (name,) = tool["function"]["parameters"]["properties"]
    tool["function"]["parameters"]["properties"][name] = {
        "type": "array",
        "items": {"type": "integer"},
        "maxItems": 3,
        "uniqueItems": True,
    }
    source = json.dumps({"builder": "vllm", "format": "hermes", "tools": [tool],
                         "tool_choice": "required"}, indent=2)  # fmt: skip
    request = {"grammar": {"kind": "tools", "source": source}, "model": MODEL, "seed": 7}
    first = client.post("/api/doctor", json=request)
    assert first.status_code == 200, first.text
    assert first.json()["witnesses"], "nothing to compare"
    with every_core_busy():
        busy = client.post("/api/doctor", json=request)
    assert busy.status_code == 200, busy.text
    assert timeless(busy.json()["witnesses"]) == timeless(first.json()["witnesses"])
    assert timeless(busy.json()) == timeless(first.json())


def test_a_part_its_safety_stop_cuts_says_cut_short_by_load(engine: Engine) -> None:
    """In-process, a budget no machine meets: partial answers that say so, never
    ``grammar_too_complex``."""
    fields = {f"field_{i}": {"type": "string", "maxLength": 8} for i in range(40)}
    schema = {"type": "object", "properties": fields, "required": list(fields)}
    spec = GrammarSpec(GrammarKind.JSON_SCHEMA, json.dumps(schema, indent=2))
    report = Doctor.of(engine).examine(spec, seed=0, budget_ms=1)
    assert report.search is not None and report.search.cut_short
    assert report.search.cut_short_by_load and report.search.to_dict()["cut_short_by_load"]
    unchecked = [k for k in report.keywords if k.status.value == "unchecked"]
    assert unchecked and all("cut short by load" in k.detail for k in unchecked), unchecked


def test_a_search_past_its_safety_stop_says_so_and_walks_no_further(engine: Engine) -> None:
    """On a clock that passes a second a look: the stop passes at the first look."""
    schema = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}
    grammar = engine.compile(GrammarSpec(GrammarKind.JSON_SCHEMA, json.dumps(schema)))
    doctor = Doctor.of(engine)
    late = Deadline(0.5, clock=itertools.count().__next__)
    found = search(grammar, doctor.tokens, doctor.vocab(), schema=schema, seed=0, deadline=late)
    assert found.search is not None and found.search.cut_short and found.search.cut_short_by_load
    assert found.search.grammar_documents == found.search.schema_documents == 0
    roomy = search(grammar, doctor.tokens, doctor.vocab(), schema=schema, seed=0,
                   deadline=Deadline(3600))  # fmt: skip
    assert roomy.search is not None and not roomy.search.cut_short_by_load
    assert roomy.search.grammar_documents > 0 and roomy.witnesses
