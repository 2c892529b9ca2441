"""xgrammar and llguidance side by side on every example schema: compile and mask costs.

For each example, with the default options (and with ``--preset``'s), prints both libraries':

- time to first mask: compile (xgrammar in-process, its cache off; llguidance's grammar
  serialization and parser build) plus a fresh matcher's first mask, p50 and p99 over
  ``--rounds`` compiles;
- per-step mask time: ``fill_next_token_bitmask`` at every step of one document (the example
  traced greedily under xgrammar once), p50 and p99 over all steps of all rounds;
- the ratios llguidance / xgrammar, measured in this run.

Usage: ``PYTHONPATH=. .venv/bin/python bench/engines.py [--rounds 20] [--preset maskscope]``
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import time
from collections.abc import Callable

import numpy as np
import xgrammar as xgr

from app.engine import (
    ChatMessage,
    Engine,
    GrammarKind,
    GrammarSpec,
    MaskingLibrary,
    presets,
    with_schema,
)
from app.engine.grammars.llguidance.compiler import VERSION, LlguidanceGrammar, fill_bitmask
from app.engine.mask import new_bitmask
from app.engine.masking import new_masking
from app.examples import Example, load_examples
from app.settings import Settings


def _percentiles(values: list[float]) -> tuple[float, float]:
    return float(np.percentile(values, 50)), float(np.percentile(values, 99))


def _document(engine: Engine, example: Example, spec: GrammarSpec) -> list[int]:
    """The example's greedy output under xgrammar, as token ids (stop token included)."""
    source = example.source()
    system = with_schema(example.system, source) if example.schema_in_prompt else example.system
    session = engine.new_session(
        spec,
        messages=[ChatMessage("system", system), ChatMessage("user", example.prompt)],
        max_tokens=example.max_tokens,
    )
    session.run(example.max_tokens)
    return [s.token_id for s in session.steps]


def _first_mask_ms(engine: Engine, spec: GrammarSpec, *, rounds: int) -> list[float]:
    """Compile plus a fresh matcher's first mask, ``rounds`` times, nothing cached."""
    vocab = engine.model.tokens.vocab_size
    bitmask = new_bitmask(vocab)
    times = []
    if spec.library is MaskingLibrary.XGRAMMAR:
        compiler = xgr.GrammarCompiler(engine.model.tokens.info, cache_enabled=False)
        o = spec.options
        for _ in range(rounds):
            start = time.perf_counter()
            compiled = compiler.compile_json_schema(
                spec.source, any_whitespace=o.any_whitespace, strict_mode=o.strict_mode,
                indent=o.indent, separators=o.separators, max_whitespace_cnt=o.max_whitespace_cnt,
            )  # fmt: skip
            xgr.GrammarMatcher(compiled).fill_next_token_bitmask(bitmask)
            times.append((time.perf_counter() - start) * 1000)
        return times
    llg = engine.llguidance
    tokenizer = llg.tokenizer()
    for _ in range(rounds):
        start = time.perf_counter()
        grammar, _ = llg.serialize(spec)
        matcher = LlguidanceGrammar(tokenizer, grammar, engine.model.tokens.stop_ids).matcher()
        fill_bitmask(matcher, bitmask)
        times.append((time.perf_counter() - start) * 1000)
    return times


def _mask_us(engine: Engine, spec: GrammarSpec, *, ids: list[int], rounds: int) -> list[float]:
    """Every step's mask fill over the document, ``rounds`` times."""
    grammar = engine.compile(spec)
    bitmask = new_bitmask(engine.model.tokens.vocab_size)
    times = []
    for _ in range(rounds):
        masking = new_masking(grammar)
        for token in ids:
            start = time.perf_counter()
            masking.fill_next_token_bitmask(bitmask)
            times.append((time.perf_counter() - start) * 1e6)
            if not masking.accept_token(token):
                raise SystemExit(f"{masking.name} refused the document at token {token}")
    return times


def _row(
    label: str, measure: Callable[[GrammarSpec], list[float]], specs: tuple[GrammarSpec, ...]
) -> str:
    (xp50, xp99), (lp50, lp99) = (_percentiles(measure(spec)) for spec in specs)
    return (
        f"  {label:<14} xgrammar p50 {xp50:9.2f} p99 {xp99:9.2f} | llguidance p50 {lp50:9.2f}"
        f" p99 {lp99:9.2f} | llguidance/xgrammar p50 {lp50 / xp50:6.2f}x p99 {lp99 / xp99:6.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--preset", default="maskscope", choices=sorted(presets()))
    args = parser.parse_args()
    engine = Engine.load(Settings(compile_workers=1))
    try:
        engine.llguidance.tokenizer()  # built once per process, not part of a compile
        print(f"preset {args.preset}; {args.rounds} rounds; llguidance {VERSION}")
        llguidance = MaskingLibrary.LLGUIDANCE
        first_mask = functools.partial(_first_mask_ms, engine, rounds=args.rounds)
        for example in load_examples():
            spec = GrammarSpec(GrammarKind.JSON_SCHEMA, example.source(), presets()[args.preset])
            # the preset's options as the preset names them for llguidance (vllm: its guidance)
            options = presets(llguidance)[args.preset]
            specs = (spec, dataclasses.replace(spec, options=options, library=llguidance))
            ids = _document(engine, example, spec)
            print(f"{example.id} ({len(ids)} tokens)")
            print(_row("first mask ms", first_mask, specs))
            masks = functools.partial(_mask_us, engine, ids=ids, rounds=args.rounds)
            print(_row("mask us", masks, specs))
    finally:
        engine.close()


if __name__ == "__main__":
    main()
