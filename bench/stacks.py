"""A serving stack's warm runner against Maskscope's in-process xgrammar (issue #40).

For each shipped stack (``make stacks``), on Qwen3.6's tokenizer, a hermes ``required`` tools
source: the warm builder call (``VllmBuilder.build``, the runner already started) against the
in-process xgrammar builder's build of the same tools; and a stack-masked replay step (the row
vLLM's own ``StructuredOutputManager.grammar_bitmask`` fills, over the runner's socket, per step
of a 40-token call) against the in-process replay step. One run, printed as ratios; the machine
is shared and wall-clock times scale with its load.

Usage: ``PYTHONPATH=. .venv/bin/python bench/stacks.py [--rounds 5]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from app.engine.factories.tokenizer_only import open_tokenizer
from app.engine.grammars.spec import CompileOptions, GrammarSpec
from app.engine.grammars.tools.base import ToolsRequest
from app.engine.grammars.tools.xgrammar_builder import XgrammarBuilder
from app.engine.stacks import close_runners, configured, runner
from app.engine.stacks.replay import stack_replay
from app.engine.stepper.replay import replay
from app.settings import Settings
from app.vocabulary import GrammarKind
from tests.engine.stacks.test_stack_replay import SEARCH as TOOL

CALL = '<tool_call>\n{"name": "search", "arguments": {"query": "weather in Paris today"}}\n'


def _median_ms(call: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    """Print, per stack, the warm build and the masked step, and their ratio to in-process."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    rounds = parser.parse_args().rounds
    settings = Settings(stack_runner_dir=Path(tempfile.mkdtemp(prefix="bench-stacks-")))
    engine = open_tokenizer(settings, "qwen3.6")
    assert engine is not None
    tokenizer = engine.tools.tokenizer
    tokens = engine.model.tokens
    source = json.dumps({"builder": "vllm", "format": "hermes", "tools": [TOOL],
                         "tool_choice": "required"})  # fmt: skip
    grammar = engine.compile(GrammarSpec(GrammarKind.TOOLS, source, CompileOptions()))
    ids = tokens.encode(CALL)
    inproc = XgrammarBuilder()
    xgr_request = ToolsRequest(builder="xgrammar", format="qwen_3", tools=(TOOL,),
                               tool_choice="required")  # fmt: skip
    build_ms = _median_ms(lambda: inproc.build(xgr_request, tokenizer), rounds)
    step_ms = _median_ms(lambda: replay(grammar, tokens, token_ids=ids), rounds) / len(ids)
    print(f"in-process: build {build_ms:.2f} ms, replay step {step_ms * 1000:.0f} us "
          f"({len(ids)} tokens)")  # fmt: skip
    request = ToolsRequest(builder="vllm", format="hermes", tools=(TOOL,), tool_choice="required")
    try:
        for name in configured(settings):
            builder = runner(settings, name)
            builder.build(request, tokenizer)  # starts the runner: not timed
            warm = _median_ms(lambda b=builder: b.build(request, tokenizer), rounds)  # type: ignore[misc]
            masked = _median_ms(
                lambda b=builder: stack_replay(b, grammar, tokens, tokenizer=tokenizer,  # type: ignore[misc]
                                               token_ids=ids),
                rounds,
            ) / len(ids)  # fmt: skip
            print(
                f"{name}: warm build {warm:.1f} ms ({warm / build_ms:.0f}x in-process), "
                f"masked step {masked * 1000:.0f} us ({masked / step_ms:.1f}x in-process)"
            )
    finally:
        close_runners()
        engine.close()


if __name__ == "__main__":
    main()
