"""An uncached compile while two clients loop a schema holding a 5,000-digit integer.

Issue #46, item 2: Python's JSON parser raises on an integer past 4,300 digits; a compile worker
that did not catch it died, and another client's compile waited for a new one to start (60 s
with two clients looping it). Now the integer is the hostile request's 422 and the worker serves
on; idle workers go to the longest waiter (``app/engine/handoff.py``), so two clients looping
a request answered in a millisecond cannot starve a third either.

Runs the compiler the server runs (two worker processes, the default model's tokenizer) for
``--seconds``: two threads loop the hostile schema, a third compiles a new regex each time
(no cache answers). Prints the third's p50 and worst latency, its failures, and the ratio of its
p50 to the same compiles with no hostile load. The machine is shared: compare the ratios.

Usage: ``PYTHONPATH=. .venv/bin/python bench/hostile_json.py [--seconds 20]``
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

from app.engine.grammars.compiler import GrammarCompiler
from app.engine.grammars.spec import GrammarKind, GrammarSpec
from app.engine.model.loading import load_model
from app.exceptions import MaskscopeError
from app.settings import Settings

HOSTILE = GrammarSpec(GrammarKind.JSON_SCHEMA, '{"maximum": %s}' % ("1" * 5000))  # noqa: UP031


def _innocent(compiler: GrammarCompiler, seconds: float, tag: str) -> tuple[list[float], int]:
    """Latencies of new compiles for ``seconds``, and how many failed."""
    latencies: list[float] = []
    failed = 0
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        start = time.perf_counter()
        try:
            compiler.compile(GrammarSpec(GrammarKind.REGEX, f"[0-9]+{tag}{len(latencies)}"))
        except MaskscopeError:
            failed += 1
        latencies.append(time.perf_counter() - start)
    return latencies, failed


def _loop(compiler: GrammarCompiler, stop: float) -> None:
    while time.monotonic() < stop:
        try:
            compiler.compile(HOSTILE)
        except MaskscopeError:
            pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    info = load_model(Settings()).tokens.info
    with GrammarCompiler(info, workers=2) as compiler:
        compiler.compile(GrammarSpec(GrammarKind.REGEX, "warm"))
        quiet, _ = _innocent(compiler, args.seconds / 4, "q")
        stop = time.monotonic() + args.seconds
        loops = [threading.Thread(target=_loop, args=(compiler, stop)) for _ in range(2)]
        for loop in loops:
            loop.start()
        loaded, failed = _innocent(compiler, args.seconds, "l")
        for loop in loops:
            loop.join()
    p50_quiet, p50_loaded = statistics.median(quiet), statistics.median(loaded)
    print(f"quiet:  {len(quiet)} compiles, p50 {1000 * p50_quiet:.1f} ms")
    print(
        f"looped: {len(loaded)} compiles, p50 {1000 * p50_loaded:.1f} ms, "
        f"worst {1000 * max(loaded):.0f} ms, failed {failed}"
    )
    print(f"p50 ratio looped/quiet: {p50_loaded / p50_quiet:.2f}x")


if __name__ == "__main__":
    main()
