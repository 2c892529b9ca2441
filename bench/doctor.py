"""The Doctor as the server runs it (``POST /api/doctor``, worker processes): its times, its
budget, and the server's memory under hostile sizes.

Three parts, each request cold for the grammar (a unique ``$comment``, or a comment line for a
Pydantic source, so no compile comes from the cache):

1. every example, JSON Schema and Pydantic forms, ``--rounds`` times: p50 and p99;
2. ``--combinations`` schemas of random keyword combinations (seeded: the same ``--seed`` gives
   the same schemas): p50 and p99, the share of answers slower than ``budget_ms``, the share
   cut short (and of those, by load: the safety stop), and the answers that are not 200 (by
   code);
3. the server's RSS (this process: the app runs in it, served through Starlette's test client)
   before and after the hostile sizes (``"minLength": 1e9``, 2000 arrays of 2000 integers, the
   ``$anchor`` loop): it must not grow (21.9 GB on aa2ae5c).

The first request also starts the Doctor's worker processes; that warm-up is timed apart.
Times are wall-clock on this machine, printed as measured; nothing is asserted.

Usage: ``PYTHONPATH=. .venv/bin/python bench/doctor.py [--rounds 3] [--combinations 200]
[--budget-ms 2000] [--seed 0]``
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from app.doctor import DEFAULT_BUDGET_MS
from app.engine import Engine
from app.examples import load_examples
from app.main import create_app
from app.settings import Settings

HOSTILE: dict[str, Any] = {
    "minLength 1e9": {"type": "string", "minLength": 1_000_000_000},
    "2000 x 2000 integers": {
        "type": "array",
        "minItems": 2000,
        "items": {"type": "array", "minItems": 2000, "items": {"type": "integer"}},
    },
    "$anchor loop": {"$ref": "#bigint", "$defs": {"bigint": {"$anchor": "bigint", "maximum": 10}}},
    "multipleOf 0.123456789": {"type": "integer", "multipleOf": 0.123456789},
}


def rss_mb() -> float:
    """This process's resident memory."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


class Combinations:
    """Random schemas made of the keywords the Doctor examines, from one seed."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(f"bench/doctor/{seed}")

    def scalar(self, depth: int) -> dict[str, Any]:
        rng = self.rng
        kind = rng.choice(["string", "integer", "number", "boolean", "null", None])
        node: dict[str, Any] = {} if kind is None else {"type": kind}
        table: dict[str, list[tuple[str, Any]]] = {
            "string": [
                ("minLength", rng.randint(0, 4)),
                ("maxLength", rng.randint(4, 12)),
                ("pattern", rng.choice(["^[a-z]+$", "^\\d{3}-\\d{4}$", "a|b"])),
                ("format", rng.choice(["date", "email", "uuid", "date-time"])),
            ],
            "integer": [
                ("minimum", rng.randint(-10, 5)),
                ("maximum", rng.randint(6, 100)),
                ("multipleOf", rng.choice([2, 3, 0.5, 0.123456789])),
                ("exclusiveMinimum", rng.randint(-5, 0)),
            ],
            "number": [
                ("minimum", -1.5),
                ("maximum", rng.choice([1, 2.5, 1e300])),
                ("multipleOf", rng.choice([0.25, 0.1])),
            ],
        }
        untyped = [("enum", [0, "a", None]), ("const", 1), ("not", {"const": 0})]
        extras = table.get(kind or "", untyped)
        for key, value in rng.sample(extras, rng.randint(0, len(extras))):
            node[key] = value
        return node

    def node(self, depth: int) -> dict[str, Any]:
        rng = self.rng
        shape = rng.random() if depth < 3 else 1.0
        if shape < 0.3:
            names = rng.sample(["id", "name", "tags", "when", "score", "kind"], rng.randint(1, 4))
            node: dict[str, Any] = {"properties": {n: self.node(depth + 1) for n in names}}
            if rng.random() < 0.8:
                node["type"] = "object"
            for key, value in rng.sample(
                [("required", names[: rng.randint(0, len(names))]),
                 ("additionalProperties", rng.choice([False, True, {"type": "integer"}])),
                 ("minProperties", 1), ("maxProperties", 2),
                 ("dependentRequired", {names[0]: names[-1:]})],
                rng.randint(0, 3),
            ):  # fmt: skip
                node[key] = value
            return node
        if shape < 0.5:
            node = {"items": self.node(depth + 1)}
            if rng.random() < 0.8:
                node["type"] = "array"
            for key, value in rng.sample(
                [("minItems", rng.randint(0, 2)), ("maxItems", rng.randint(2, 4)),
                 ("uniqueItems", True), ("contains", {"type": "integer"}),
                 ("prefixItems", [self.scalar(depth + 1)])],
                rng.randint(0, 3),
            ):  # fmt: skip
                node[key] = value
            return node
        if shape < 0.6:
            key = rng.choice(["anyOf", "oneOf", "allOf"])
            return {key: [self.scalar(depth + 1) for _ in range(rng.randint(1, 3))]}
        return self.scalar(depth)

    def schema(self) -> dict[str, Any]:
        root = self.node(0)
        if self.rng.random() < 0.1:  # a reference through $defs
            return {"$ref": "#/$defs/root", "$defs": {"root": root}}
        return root


class Bench:
    """Requests to one app, timed."""

    def __init__(self, client: TestClient, budget_ms: int) -> None:
        self.client = client
        self.budget_ms = budget_ms

    def ask(self, grammar: dict[str, Any]) -> tuple[float, int, dict[str, Any]]:
        body = {"grammar": grammar, "budget_ms": self.budget_ms}
        start = time.perf_counter()
        answer = self.client.post("/api/doctor", json=body)
        return 1000 * (time.perf_counter() - start), answer.status_code, answer.json()

    def schema(self, schema: Any) -> tuple[float, int, dict[str, Any]]:
        tagged = {**schema, "$comment": str(uuid.uuid4())} if isinstance(schema, dict) else schema
        return self.ask({"kind": "json_schema", "source": json.dumps(tagged, indent=2)})

    def summary(self, label: str, runs: list[tuple[float, int, dict[str, Any]]]) -> None:
        times = [ms for ms, _, _ in runs]
        ok = [body for _, status, body in runs if status == 200]
        cut = sum(bool((b.get("search") or {}).get("cut_short")) for b in ok)
        by_load = sum(bool((b.get("search") or {}).get("cut_short_by_load")) for b in ok)
        codes = Counter(
            f"{status} {body['error']['code']}" for _, status, body in runs if status != 200
        )
        over = sum(ms > self.budget_ms for ms in times)
        print(
            f"{label}: {len(runs)} requests, p50 {statistics.median(times):.0f} ms, "
            f"p99 {percentile(times, 0.99):.0f} ms, max {max(times):.0f} ms; over the "
            f"{self.budget_ms} ms budget: {over / len(runs):.1%}; cut short: {cut}/{len(ok)} "
            f"(by load: {by_load}); not 200: {dict(codes) or 'none'}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--combinations", type=int, default=200)
    parser.add_argument("--budget-ms", type=int, default=DEFAULT_BUDGET_MS)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    settings = Settings()
    engine = Engine.load(settings)
    try:
        # localhost: a Host the server answers to (testserver is refused, DNS rebinding).
        app = create_app(settings, engine=engine)
        with TestClient(app, base_url="http://localhost") as client:
            bench = Bench(client, args.budget_ms)
            print(f"safety stop: {args.budget_ms} ms a part, {settings.doctor_time_limit_s:g} s "
                  "an examination (MASKSCOPE_DOCTOR_TIME_LIMIT_S)")  # fmt: skip
            ms, status, _ = bench.schema({"type": "integer"})
            print(f"warm-up (the first request starts the worker processes): {ms:.0f} ms, {status}")
            runs = []
            for example in load_examples():
                for _ in range(args.rounds):
                    runs.append(bench.schema(json.loads(example.source(".json"))))
                    source = example.source(".py") + f"\n# {uuid.uuid4()}\n"
                    runs.append(bench.ask({"kind": "pydantic", "source": source}))
            bench.summary("examples (JSON Schema and Pydantic)", runs)
            combinations = Combinations(args.seed)
            mixed = [bench.schema(combinations.schema()) for _ in range(args.combinations)]
            bench.summary(f"keyword combinations (seed {args.seed})", mixed)
            before = rss_mb()
            print(f"server RSS before the hostile sizes: {before:.0f} MB")
            for name, schema in HOSTILE.items():
                ms, status, body = bench.schema(schema)
                note = body.get("error", {}).get("code") or (body.get("search") or {}).get(
                    "too_large"
                )
                print(f"  {name}: {status} in {ms:.0f} ms ({note}); RSS {rss_mb():.0f} MB")
            print(f"server RSS after: {rss_mb():.0f} MB ({rss_mb() - before:+.0f} MB)")
    finally:
        engine.close()


if __name__ == "__main__":
    main()
