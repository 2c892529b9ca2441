"""What a batch of schema unit tests costs, and what the verdict-only walk saves over a replay.

Two batches of 100 tests on the nested example: documents already in the grammar's form, then
documents written compactly (refused as written, so each is walked twice and the refusal's
sample of expected tokens is computed). Each batch runs through ``run_tests`` (walks with
``Engine.verdict``: no mask but at a refusal; jsonschema verdicts included), then the same texts
are walked with ``Engine.replay`` (a mask, the active rules and the JSON position at every
token). Prints tokens walked, ms of each, and their ratio.

Usage: ``PYTHONPATH=. .venv/bin/python bench/schema_tests.py``
"""

from __future__ import annotations

import json
import time

from app.doctor.serialize import normalize
from app.engine import CompileResult, Engine, GrammarKind, GrammarSpec
from app.examples import load_examples
from app.schematests import Expect, SchemaTest, run_tests
from app.settings import Settings


def _documents(separators: tuple[str, str]) -> list[str]:
    texts = []
    for i in range(100):
        settings = {"theme": "dark", "notifications": i % 2 == 0}
        user = {"id": i + 1, "profile": {"display_name": f"User {i}", "settings": settings}}
        texts.append(json.dumps({"user": user}, separators=separators))
    return texts


def _batch(engine: Engine, grammar: CompileResult, texts: list[str], label: str) -> None:
    tests = [SchemaTest(text, Expect.PASS) for text in texts]
    started = time.perf_counter()
    results = run_tests(engine, grammar, tests)
    verdict_ms = (time.perf_counter() - started) * 1000
    assert all(r.passed for r in results)
    schema = json.loads(grammar.spec.source)
    walked = texts + [
        n for t in texts if (n := normalize(t, schema, grammar.spec.options)) and n != t
    ]
    tokens = sum(len(engine.model.tokens.encode(text)) for text in walked)
    started = time.perf_counter()
    for text in walked:
        engine.replay(grammar, text=text)
    replay_ms = (time.perf_counter() - started) * 1000
    print(f"{label}: 100 tests, {len(walked)} walks, {tokens} tokens")
    print(f"  run_tests (verdict walks + jsonschema): {verdict_ms:8.1f} ms")
    print(f"  the same texts through a full replay:   {replay_ms:8.1f} ms")
    print(f"  replay / run_tests: {replay_ms / verdict_ms:.1f}x")


def main() -> None:
    engine = Engine.load(Settings(compile_workers=1))
    try:
        source = next(e for e in load_examples() if e.id == "nested").source()
        grammar = engine.compile(GrammarSpec(GrammarKind.JSON_SCHEMA, source))
        _batch(engine, grammar, _documents((", ", ": ")), "in the grammar's form")
        _batch(engine, grammar, _documents((",", ":")), "written compactly")
    finally:
        engine.close()


if __name__ == "__main__":
    main()
