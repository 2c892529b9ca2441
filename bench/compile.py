"""API compile against xgrammar's own compile, on 60 public real-world JSON Schemas.

For each schema of ``bench/data/realworld_schemas.json`` (made unique each round, so that no
cache answers), times ``POST /api/compile`` on a live server (its compile workers, cold) and
xgrammar's own ``compile_json_schema`` in this process, with the same tokenizer and the options
the API answered with, cache off, once with the threads a worker gives xgrammar (no more than
the cores) and once with xgrammar's default (8 threads); the three take turns going first. Prints
the p50s and the API's ratio to each (target: API <= 1.5x xgrammar's own, with the same
threads), then, measured here in the same run, the meta-schema
check as the worker runs it (``parse_schema``: the compiled fast check, jsonschema only for an
invalid schema) against jsonschema's own walk, which it replaced, and what the compile path used
to add: serialising the compiled grammar (the worker), serialising the grammar again for its
rule names, and deserialising it (the server). The serialised grammar now moves only when a
session or a replay first needs its masks.

The machine is shared and wall-clock times scale with its load: compare the ratios.

Usage: ``PYTHONPATH=. .venv/bin/python bench/compile.py [--rounds 2]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import xgrammar as xgr
from live_server import live_server
from transformers import AutoConfig, AutoTokenizer

from app.engine.grammars.compile_worker import compile_threads, parse_schema
from app.engine.grammars.jsonschema_safe import error_list, meta_validator
from app.engine.model.loading import checkpoint_source, stop_ids_of
from app.settings import Settings

SCHEMAS = Path(__file__).resolve().parent / "data" / "realworld_schemas.json"


def _p50(seconds: list[float]) -> float:
    return 1000 * statistics.median(seconds)


def _tokenizer_info() -> Any:
    """The default model's tokenizer as the server builds it (no weights loaded here)."""
    source = checkpoint_source(Settings())
    tokenizer = AutoTokenizer.from_pretrained(source)
    config = AutoConfig.from_pretrained(source)
    vocab = int(config.get_text_config().vocab_size)
    stops = stop_ids_of(config, None, tokenizer)
    return xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab, stop_token_ids=stops)


def _kwargs(options: dict[str, Any]) -> dict[str, Any]:
    separators = options.get("separators")
    return {
        "any_whitespace": options["any_whitespace"],
        "strict_mode": options["strict_mode"],
        "indent": options.get("indent"),
        "separators": tuple(separators) if separators else None,
        "max_whitespace_cnt": options.get("max_whitespace_cnt"),
    }


def _unique(schema: dict[str, Any]) -> str:
    return json.dumps({**schema, "$comment": str(uuid.uuid4())}, indent=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    schemas = [json.loads(entry["source"]) for entry in json.loads(SCHEMAS.read_text())["schemas"]]
    info = _tokenizer_info()
    threads = compile_threads(len(os.sched_getaffinity(0)))
    own_compilers = (
        xgr.GrammarCompiler(info, max_threads=threads, cache_enabled=False),
        xgr.GrammarCompiler(info, cache_enabled=False),
    )
    api, worker_ms = [], []
    own: tuple[list[float], list[float]] = ([], [])
    extra: dict[str, list[float]] = {
        "check": [],
        "jsonschema": [],
        "serialise": [],
        "rules": [],
        "deserialise": [],
    }
    with live_server() as (base, _), httpx.Client(base_url=base, timeout=600) as client:
        print(f"{len(schemas)} schemas x {args.rounds} rounds; load {os.getloadavg()[0]:.1f}")
        warm = client.post("/api/compile", json={"kind": "json_schema", "source": "{}"})
        kwargs = _kwargs(warm.raise_for_status().json()["options"])  # the API's defaults
        for round_ in range(args.rounds):
            for index, schema in enumerate(schemas):
                source = _unique(schema)
                body = {"kind": "json_schema", "source": source}
                shift = index + round_
                for turn in (shift % 3, (shift + 1) % 3, (shift + 2) % 3):
                    start = time.perf_counter()
                    if turn == 2:
                        answer = client.post("/api/compile", json=body)
                        answer.raise_for_status()
                        api.append(time.perf_counter() - start)
                        worker_ms.append(answer.json()["stats"]["compile_ms"] / 1000)
                    else:
                        compiled = own_compilers[turn].compile_json_schema(source, **kwargs)
                        own[turn].append(time.perf_counter() - start)
                _old_path_costs(source, compiled, info, extra)
    same, default = (statistics.median(api) / statistics.median(o) for o in own)
    print(f"API compile p50 {_p50(api):.1f} ms (its workers give xgrammar {threads} threads)")
    print(f"  xgrammar's own, {threads} threads: p50 {_p50(own[0]):.1f} ms: "
          f"ratio {same:.2f} (target <= 1.5)")  # fmt: skip
    print(f"  xgrammar's own, its default 8 threads: p50 {_p50(own[1]):.1f} ms: "
          f"ratio {default:.2f}")  # fmt: skip
    outside = [a - w for a, w in zip(api, worker_ms, strict=True)]
    print(f"  the worker's own compile_ms p50 {_p50(worker_ms):.1f} ms (the schema's checks run "
          f"before it); outside it (round trip, HTTP) p50 {_p50(outside):.1f} ms")  # fmt: skip
    print("the schema's checks as the worker runs them (check), jsonschema's meta-schema walk they")
    print("replaced, and what the compile path used to add (now off it), measured in this run:")
    for name, seconds in extra.items():
        print(f"  {name:12s} p50 {_p50(seconds):6.2f} ms  ({statistics.median(seconds) / statistics.median(own[0]):.2f}x own)")  # fmt: skip  # noqa: E501


def _old_path_costs(source: str, compiled: Any, info: Any, extra: dict[str, list[float]]) -> None:
    start = time.perf_counter()
    schema = parse_schema(source)
    extra["check"].append(time.perf_counter() - start)
    start = time.perf_counter()
    assert not error_list(meta_validator(schema), schema)
    extra["jsonschema"].append(time.perf_counter() - start)
    start = time.perf_counter()
    serialized = compiled.serialize_json()
    extra["serialise"].append(time.perf_counter() - start)
    start = time.perf_counter()
    json.loads(compiled.grammar.serialize_json())
    extra["rules"].append(time.perf_counter() - start)
    start = time.perf_counter()
    xgr.CompiledGrammar.deserialize_json(serialized, info)
    extra["deserialise"].append(time.perf_counter() - start)


if __name__ == "__main__":
    main()
