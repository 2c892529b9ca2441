"""The Doctor on every example, JSON Schema and Pydantic forms, against its 5 s target.

Each run is cold for the grammar: the schema gets a unique ``$comment`` so that no compile is
served from the cache (the Doctor compiles the request and its other whitespace setting). The
time against the target is the Doctor's (``examine``, its sandbox batch for Pydantic included);
``derive`` is the sandbox deriving a Pydantic source's schema first, which the page's compile has
already done (and cached) when it asks the Doctor. The first run also builds the sorted
vocabulary and llguidance's tokenizer; that warm-up is timed apart.

Usage: ``PYTHONPATH=. .venv/bin/python bench/doctor.py [--rounds 3] [--budget-ms 2000]``
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time
import uuid

from app.doctor import DEFAULT_BUDGET_MS, Doctor, PydanticSource
from app.doctor.records import Direction
from app.engine import Engine, GrammarKind, GrammarSpec
from app.examples import load_examples
from app.sandbox.sandbox import Sandbox
from app.settings import Settings

TARGET_MS = 5000.0


def _spec(sandbox: Sandbox, source: str, form: str) -> tuple[GrammarSpec, PydanticSource | None]:
    """The request as the page sends it after a compile: a fresh schema (no compile cache)."""
    tag = str(uuid.uuid4())
    pydantic = None
    if form == "py":
        source += f"\n# {tag}\n"
        derived = sandbox.schema(source)
        validate = functools.partial(sandbox.validate_many, source, None)
        pydantic = PydanticSource(source, derived.root, validate)
        schema = derived.schema
    else:
        schema = json.loads(source)
    text = json.dumps({**schema, "$comment": tag}, indent=2)
    return GrammarSpec(GrammarKind.JSON_SCHEMA, text), pydantic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget-ms", type=int, default=DEFAULT_BUDGET_MS)
    args = parser.parse_args()
    engine = Engine.load(Settings())
    sandbox = Sandbox()
    doctor = Doctor.of(engine)
    try:
        start = time.perf_counter()
        doctor.vocab()
        engine.llguidance.tokenizer()
        print(f"warm-up (sorted vocabulary, llguidance tokenizer): "
              f"{1000 * (time.perf_counter() - start):.0f} ms, once per process")  # fmt: skip
        print(f"{'example':<10} {'form':<5} {'p50 ms':>7} {'max ms':>7} {'x target':>8} "
              f"{'derive':>7} {'flagged':>7} {'weaker':>6} {'stricter':>8} {'cut':>4}")  # fmt: skip
        worst = 0.0
        for example in load_examples():
            for form in ("json", "py"):
                times, derive, report = [], [], None
                for _ in range(args.rounds):
                    begin = time.perf_counter()
                    spec, pydantic = _spec(sandbox, example.source(f".{form}"), form)
                    derived = time.perf_counter()
                    report = doctor.examine(spec, budget_ms=args.budget_ms, pydantic=pydantic)
                    times.append(1000 * (time.perf_counter() - derived))
                    derive.append(1000 * (derived - begin))
                assert report is not None and report.search is not None
                counts = report.counts()
                weaker = sum(w.direction is Direction.GRAMMAR_ACCEPTS for w in report.witnesses)
                worst = max(worst, max(times))
                print(
                    f"{example.id:<10} {form:<5} {statistics.median(times):>7.0f} "
                    f"{max(times):>7.0f} {max(times) / TARGET_MS:>8.2f} "
                    f"{statistics.median(derive):>7.0f} "
                    f"{counts['ignored'] + counts['weakened']:>7} {weaker:>6} "
                    f"{len(report.witnesses) - weaker:>8} {report.search.cut_short!s:>5}"
                )
        print(f"slowest: {worst:.0f} ms = {worst / TARGET_MS:.2f} x the {TARGET_MS:.0f} ms target")
    finally:
        engine.close()


if __name__ == "__main__":
    main()
