"""The vLLM tools builder's costs: the runner's start (vLLM's imports), a first build on a
tokenizer (it loads), warm builds, and ``formats()`` on the default model's tokenizer.

Times are wall-clock on this machine, printed as measured; nothing is asserted. The ratio that
matters is a warm build against the start: the runner is kept so that only the first call pays.

Usage: ``PYTHONPATH=. .venv/bin/python bench/vllm_builder.py [--rounds 20] [--tokenizer
deepseek-v4|qwen3.6]``
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from app.engine.grammars.tools.base import ToolsRequest
from app.engine.grammars.tools.vllm_builder import VllmBuilder
from app.engine.model.loading import checkpoint_source
from app.engine.model.shipped_tokenizers import tokenizer_dir
from app.settings import Settings

TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        "strict": True,
    },
}


def main() -> None:
    """Measure and print."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--tokenizer", default="deepseek-v4")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        settings = Settings(cache_dir=Path(cache))
        path = str(tokenizer_dir(args.tokenizer, settings.cache_dir))
        request = ToolsRequest(builder="vllm", format="deepseek_v4", tools=(TOOL,))
        with VllmBuilder(settings) as builder:
            start = time.perf_counter()
            builder.build(request, path)
            first = time.perf_counter() - start
            warm = []
            for _ in range(args.rounds):
                start = time.perf_counter()
                builder.build(request, path)
                warm.append(time.perf_counter() - start)
            start = time.perf_counter()
            listed = builder.formats(tokenizer=checkpoint_source(Settings()))
            formats_s = time.perf_counter() - start
    median = statistics.median(warm)
    print(f"first build (start + tokenizer {args.tokenizer}): {first:.2f} s")
    print(f"warm build: median {median * 1000:.1f} ms over {args.rounds}")
    print(f"first / warm: {first / median:.0f}x")
    print(f"formats() on the default model: {formats_s:.2f} s, {len(listed)} parsers")


if __name__ == "__main__":
    main()
