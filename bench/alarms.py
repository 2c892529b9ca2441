"""What the breakpoints and alarms cost a step: a run with the default alarms against one with
none, on the default model.

Runs the pricing example greedily, with the default alarms (every session's) and with no
condition watched, interleaved ``--rounds`` times, and prints per step the time outside the
forward pass (``total_ms - forward_ms``) p50 of each and their ratio, then the evaluation of
the default alarms alone on the same records (p50 per step, target <= 0.05 ms), and the same
with a dozen breakpoints, one of each condition.

Usage: ``.venv/bin/python bench/alarms.py [--rounds 2] [--tokens 64]``
"""

from __future__ import annotations

import argparse
import statistics
import time

from app.engine import ChatMessage, Engine, GrammarKind, GrammarSpec, with_schema
from app.engine.records import StepRecord
from app.engine.stepper.breakpoints import (
    DEFAULT_ALARMS,
    Watch,
    parse_breakpoint,
    records_with,
)
from app.engine.stepper.session import Session
from app.examples import load_examples
from app.settings import Settings

#: the most the default alarms may add to a step (issue #43)
TARGET_MS = 0.05
#: one breakpoint of each condition (none of which holds on the pricing run's first steps)
EVERY = [
    "path=$.nowhere*", "segment=arguments", "token=<nothing>", "allowed_at_most=0",
    "whitespace_only,k=3", "digits_only,k=3", "top1_blocked,k=50", "removed_above=2",
    "empty_mask", "jump_forward_over=10000", "disagreement", "rollback_differs",
]  # fmt: skip


def _session(engine: Engine, max_tokens: int, *, alarms: bool) -> Session:
    example = next(e for e in load_examples() if e.id == "pricing")
    session = engine.new_session(
        GrammarSpec(GrammarKind.JSON_SCHEMA, example.source()),
        messages=[
            ChatMessage("system", with_schema(example.system, example.source())),
            ChatMessage("user", example.prompt),
        ],
        max_tokens=max_tokens,
    )
    if not alarms:
        session.watch = Watch()  # nothing watched: the evaluation is a loop over nothing
    return session


def _outside(records: list[StepRecord]) -> list[float]:
    return [r.total_ms - r.forward_ms for r in records[1:]]  # step 0 holds the prefill


def _evaluation_ms(watch: Watch, records: list[StepRecord]) -> float:
    """p50 of one evaluation of ``watch`` per step, over the records of a run."""
    times = []
    for i, record in enumerate(records):
        start = time.perf_counter()
        watch.evaluate(records_with(records[:i], record))
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    """Run both, interleaved, and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    engine = Engine.load(Settings())
    with_alarms: list[float] = []
    without: list[float] = []
    records: list[StepRecord] = []
    try:
        _session(engine, 4, alarms=True).run(4)  # warm up
        for _ in range(args.rounds):
            for alarms, out in ((True, with_alarms), (False, without)):
                ran = _session(engine, args.tokens, alarms=alarms).run(args.tokens)
                out.extend(_outside(ran))
                records = ran
    finally:
        engine.close()
    a, b = statistics.median(with_alarms), statistics.median(without)
    print(f"outside the forward pass, p50: default alarms {a:.3f} ms, none {b:.3f} ms, "
          f"ratio {a / b:.3f} ({len(with_alarms)} steps each)")  # fmt: skip
    defaults = _evaluation_ms(Watch(defaults=DEFAULT_ALARMS), records)
    every = _evaluation_ms(Watch([parse_breakpoint(t) for t in EVERY], defaults=DEFAULT_ALARMS),
                           records)  # fmt: skip
    print(f"evaluation alone, p50 per step: default alarms {defaults:.4f} ms, "
          f"with {len(EVERY)} breakpoints besides {every:.4f} ms")  # fmt: skip
    verdict = "ok" if defaults <= TARGET_MS else "OVER"
    print(f"TARGET default alarms <= {TARGET_MS} ms per step: {defaults:.4f} ms {verdict}")


if __name__ == "__main__":
    main()
