"""``check`` over a suite: schemas a second, against xgrammar's own compile of the same schemas.

JSONSchemaBench (epfl-dlab) has no mirror on PyPI or npm that this machine can reach (none is in
the registries' lists), so the suite here is NOT JSONSchemaBench: it is the repository's 60
public real-world schemas (``bench/data/realworld_schemas.json``, their origins named there) and
the JSON Schemas of ``schemas/``, written one file each into a temporary suite. Each source is
checked on both engines (xgrammar, llguidance): the Doctor's examination once, a compile per
engine. Printed: schemas/s of the first run (nothing cached), its ratio to xgrammar's own
``compile_json_schema`` of the same schemas in the same run (cache off, same tokenizer), the share
of sources whose examination the safety stop cut short (target 0 with the default budget), the
peak RSS (this process and its workers), and the second run, read from the cache.

The machine is shared and wall-clock times scale with its load: compare the ratios.

Usage: ``PYTHONPATH=. .venv/bin/python bench/suite.py [--limit 60] [--jobs 2]``
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

import xgrammar as xgr

from app.doctor import DEFAULT_BUDGET_MS
from app.engine import Engine
from app.settings import Settings
from app.suite import CheckOptions
from app.suite.cache import Cache
from app.suite.checker import Checker
from app.suite.discovery import discover

ROOT = Path(__file__).resolve().parent.parent
ENGINES = ("xgrammar", "llguidance")


def _write_suite(folder: Path, limit: int) -> list[str]:
    """The schemas, one file each; returns their texts."""
    data = json.loads((ROOT / "bench" / "data" / "realworld_schemas.json").read_text())
    texts = [json.dumps(s["source"], indent=2) if not isinstance(s["source"], str)
             else s["source"] for s in data["schemas"]]  # fmt: skip
    texts += [p.read_text() for p in sorted((ROOT / "schemas").glob("*.json"))
              if not p.name.endswith(".tools.json") and p.name != "examples.json"
              and p.name != "tool_examples.json"]  # fmt: skip
    texts = texts[:limit]
    for index, text in enumerate(texts):
        (folder / f"s{index:04d}.json").write_text(text)
    return texts


def _own_compile_s(engine: Engine, texts: list[str]) -> float:
    compiler = xgr.GrammarCompiler(engine.model.tokens.info, cache_enabled=False)
    start = time.perf_counter()
    for text in texts:
        try:
            compiler.compile_json_schema(text, any_whitespace=False, strict_mode=True)
        except RuntimeError:
            pass
    return time.perf_counter() - start


def _peak_rss_mib() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, children) / 1024


def main() -> None:
    """Run the suite twice (cold, then cached) and print the figures."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--limit", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--budget-ms", type=int, default=DEFAULT_BUDGET_MS)
    args = parser.parse_args()
    settings = Settings()
    engine = Engine.load(settings)
    options = CheckOptions(budget_ms=args.budget_ms)
    with tempfile.TemporaryDirectory() as tmp:
        folder, cache = Path(tmp) / "suite", Cache(Path(tmp) / "cache")
        folder.mkdir()
        texts = _write_suite(folder, args.limit)
        sources = discover([str(folder)])
        own_s = _own_compile_s(engine, texts)
        runs = []
        for _ in range(2):
            checker = Checker(settings, options, lambda: engine, cache=cache, jobs=args.jobs)
            start = time.perf_counter()
            cases = checker.check(sources, ["maskscope"], ENGINES)
            runs.append((time.perf_counter() - start, cases))
    (cold_s, cold), (warm_s, warm) = runs
    cut = sum(c.cut_short for c in cold if c.engine == "xgrammar")
    print(f"suite: {len(sources)} schemas (repository's real-world set, not JSONSchemaBench) "
          f"x {len(ENGINES)} engines, jobs {args.jobs}, budget {args.budget_ms} ms")  # fmt: skip
    print(f"first run: {cold_s:.1f} s, {len(sources) / cold_s:.2f} schemas/s")
    print(f"xgrammar's own compile of the same schemas: {own_s:.2f} s "
          f"(check / own compile: {cold_s / own_s:.0f}x)")  # fmt: skip
    print(f"cut short: {cut}/{len(sources)} ({cut / len(sources):.1%})")
    print(f"peak RSS: {_peak_rss_mib():.0f} MiB")
    print(f"second run (cached): {warm_s:.2f} s, {len(sources) / warm_s:.0f} schemas/s, "
          f"{sum(c.cached for c in warm)}/{len(warm)} cases cached")  # fmt: skip
    engine.close()


if __name__ == "__main__":
    main()
