"""Concurrent sessions on the engine itself (no HTTP): what batching the forward passes gives.

Runs the pricing example (schema in the prompt) greedily in one session alone, then in N
sessions at once, each in its own thread, in the same process, and prints tokens/s of each, the
ratio, and the mean rows per forward pass; then the forward pass alone for one row and for N,
whose ratio bounds what batching can give. ``bench/load.py`` measures the same over SSE, where
the web layer's own per-step work is added to every session's step.

Usage: ``.venv/bin/python bench/batching.py [--sessions 8] [--steps 20]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time

import torch

from app.engine import ChatMessage, Engine, GrammarKind, GrammarSpec, Session, with_schema
from app.engine.model.forward.batch import _Row
from app.examples import load_examples
from app.settings import Settings


def _session(engine: Engine) -> Session:
    example = next(e for e in load_examples() if e.id == "pricing")
    source = example.source()
    session = engine.new_session(
        GrammarSpec(GrammarKind.JSON_SCHEMA, source),
        messages=[ChatMessage("system", with_schema(example.system, source)),
                  ChatMessage("user", example.prompt)],
        max_tokens=example.max_tokens,
    )  # fmt: skip
    session.step()  # the prompt, alone
    return session


def _run(engine: Engine, sessions: int, steps: int) -> tuple[float, float]:
    """(tokens/s, rows per forward pass) of ``sessions`` sessions stepping at once."""
    opened = [_session(engine) for _ in range(sessions)]
    counts = engine.model.batcher.counts
    batches, rows = counts.batches, counts.rows
    threads = [threading.Thread(target=s.run, args=(steps,)) for s in opened]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    tokens = sum(len(s.steps) - 1 for s in opened)
    return tokens / elapsed, (counts.rows - rows) / max(1, counts.batches - batches)


def _ceiling(engine: Engine, sessions: int, rounds: int = 30) -> tuple[float, float]:
    """The forward pass alone, no session around it: the median seconds of one row's step and
    of ``sessions`` rows' batched step, on caches holding the example's prompt. Their ratio
    times ``sessions`` bounds what batching can give before any session's own work."""
    batcher = engine.model.batcher
    caches = [_session(engine)._forward._cache for _ in range(sessions)]  # type: ignore[attr-defined]
    timings: dict[int, list[float]] = {1: [], sessions: []}
    with torch.inference_mode():
        for step in range(rounds):
            for rows in timings:
                batch = [_Row(cache, 100 + step) for cache in caches[:rows]]
                started = time.perf_counter()
                batcher._forward(batch)
                timings[rows].append(time.perf_counter() - started)
    return statistics.median(timings[1]), statistics.median(timings[sessions])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    engine = Engine.load(Settings(compile_workers=1))
    try:
        _run(engine, 1, 3)  # warm-up
        alone, _ = _run(engine, 1, args.steps)
        together, rows = _run(engine, args.sessions, args.steps)
        one, batch = _ceiling(engine, args.sessions)
    finally:
        engine.close()
    print(f"one session alone: {alone:.1f} tokens/s")
    print(f"{args.sessions} sessions at once: {together:.1f} tokens/s = {together / alone:.2f}x "
          f"(target for 8: >= 3x); {rows:.2f} rows per forward pass")  # fmt: skip
    print(f"the forward pass alone: 1 row {one * 1000:.1f} ms, {args.sessions} rows "
          f"{batch * 1000:.1f} ms: batching gives at most "
          f"{args.sessions * one / batch:.2f}x")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
