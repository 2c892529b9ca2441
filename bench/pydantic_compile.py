"""Pydantic source -> compiled grammar, with a fresh, contained sandbox process each time.

For every example's Pydantic source (made unique each round so that no cache answers), times the
static check, the sandbox process (start, warm-up, containment and pydantic) deriving the JSON
Schema, and xgrammar's compile, and prints p50 / p95 / max. Target: p50 <= 1 s on this machine.

In the same run, the same sources go through a sandbox process with the kernel layers left out
(no_new_privs, Landlock, the uid drop, seccomp): the ratio is what the containment costs. The
machine is shared and wall-clock times scale with its load, so the load average is printed, and
the CPU time of each sandbox process too (what a run costs on an idle machine).

Usage: ``.venv/bin/python bench/pydantic_compile.py [--rounds 10]``
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import time
import uuid

from app.engine import Engine, GrammarKind, GrammarSpec
from app.examples import load_examples
from app.sandbox.contain import Level
from app.sandbox.process import Layers, run_child
from app.sandbox.sandbox import Sandbox
from app.settings import Settings

UNCONTAINED = Layers(uid=False, landlock=False, seccomp=False)


def _p50(seconds: list[float]) -> float:
    return 1000 * statistics.median(seconds)


def _children_cpu() -> float:
    """CPU seconds of the processes that have ended (each sandbox process, once reaped)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    engine = Engine.load(Settings(compile_workers=1))
    sandbox = Sandbox()
    print(f"containment: {sandbox.level.value}; load average {os.getloadavg()[0]:.1f}")
    totals, contained, uncontained, cpu = [], [], [], []
    try:
        for _ in range(args.rounds):
            for example in load_examples():
                tag = str(uuid.uuid4())
                source = example.source(".py") + f"\n# {tag}\n"
                cpu_before = _children_cpu()
                start = time.perf_counter()
                derived = sandbox.schema(source)
                derived_at = time.perf_counter()
                cpu.append(_children_cpu() - cpu_before)
                schema = {**derived.schema, "$comment": tag}  # nor the compile cache
                spec = GrammarSpec(GrammarKind.JSON_SCHEMA, json.dumps(schema, indent=2))
                engine.compile(spec)
                totals.append(time.perf_counter() - start)
                contained.append(derived_at - start)
                request = {"action": "schema", "source": source + "# bare\n", "root_model": None}
                bare_start = time.perf_counter()
                run_child(request, sandbox.limits, require=Level.NONE, layers=UNCONTAINED)
                uncontained.append(time.perf_counter() - bare_start)
    finally:
        engine.close()
    ms = [1000 * t for t in totals]
    print(f"runs: {len(ms)} ({args.rounds} rounds x {len(load_examples())} examples)")
    print(
        f"sandbox (check + process + pydantic): p50 {_p50(contained):.0f} ms contained, "
        f"{_p50(uncontained):.0f} ms without the kernel layers "
        f"(ratio {statistics.median(contained) / statistics.median(uncontained):.2f}); "
        f"CPU time of a sandbox process p50 {_p50(cpu):.0f} ms"
    )
    p95 = statistics.quantiles(ms, n=20, method="inclusive")[-1]
    print(
        f"source -> compiled grammar: p50 {statistics.median(ms):.0f} ms, p95 {p95:.0f} ms, "
        f"max {max(ms):.0f} ms  (target p50 <= 1000 ms); load average {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
