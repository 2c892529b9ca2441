"""What replaying a logged batch of 4,096 ids costs on each shipped production tokenizer.

On DeepSeek V4 (129,280 ids) and Qwen3.6 (248,320 padded ids), under xgrammar's own structural
tag for the model (one tool, reasoning on): 4,093 ids of reasoning text, then the end of
reasoning and the start of a tool call with a tool the tag does not know, so the walk ends on a
refusal that is explained (the mask summarised, the tag's cause). Prints the time of the walk
(each id: a mask fill and an accept), per id, the explanation's share, and the JSON answer's size.

Usage: ``PYTHONPATH=. .venv/bin/python bench/replay_ids.py``
"""

from __future__ import annotations

import json
import time

import xgrammar as xgr

from app.engine import CompileOptions, GrammarKind, GrammarSpec
from app.engine.factories.tokenizer_only import open_tokenizer
from app.settings import Settings

IDS = 4096
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}  # fmt: skip
PARAGRAPH = (
    "The user asks for the weather in Paris. I should call the weather tool with the city, "
    "then read its answer and reply in one sentence, with the temperature in Celsius. "
)
#: Per model: the xgrammar tag's name, and what follows the reasoning (an unknown tool's call).
MODELS = {
    "deepseek-v4": ("deepseek_v4", '</think><｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_time'),
    "qwen3.6": ("qwen_3_5", "</think>\n\n<tool_call>\n<function=get_time"),
}


def _bench(name: str) -> None:
    settings = Settings(compile_workers=1, replay_max_tokens=IDS)
    engine = open_tokenizer(settings, name)
    assert engine is not None
    try:
        model, tail = MODELS[name]
        built = xgr.get_model_structural_tag(model, tools=[WEATHER], reasoning=True)
        spec = GrammarSpec(GrammarKind.STRUCTURAL_TAG, built.model_dump_json(), CompileOptions())
        grammar = engine.compile(spec)
        tokens = engine.model.tokens
        ending = tokens.encode(tail)
        reasoning = tokens.encode(PARAGRAPH * (IDS // 20))[: IDS - len(ending)]
        ids = reasoning + ending
        started = time.perf_counter()
        accepted = engine.replay(grammar, token_ids=reasoning)
        walk_ms = (time.perf_counter() - started) * 1000
        timed = []
        for _ in range(2):  # the first summary reads every token's bytes once per vocabulary
            started = time.perf_counter()
            refused = engine.replay(grammar, token_ids=ids)
            timed.append((time.perf_counter() - started) * 1000)
        assert accepted.accepted and refused.refusal is not None, refused.rejection
        size = len(json.dumps(refused.to_dict()))
        walked = len(refused.tokens)
        per_id = walk_ms / len(reasoning) * 1000
        print(f"{name}: vocabulary {tokens.vocab_size}, {len(ids)} ids, refused at {walked - 1}")
        print(f"  {len(reasoning)} accepted ids: {walk_ms:8.1f} ms ({per_id:.0f} us/id)")
        share = timed[1] / walk_ms - 1
        print(f"  all {len(ids)} ids, the refusal explained: {timed[0]:8.1f} ms the first time, "
              f"{timed[1]:.1f} ms after (explaining: {share:+.0%} of the walk)")  # fmt: skip
        print(f"  the answer: {size / 1024:.0f} KiB ({size / walked:.0f} bytes/id)")
        print(f"  cause: {refused.refusal.cause}")
    finally:
        engine.close()


def main() -> None:
    for name in MODELS:
        _bench(name)


if __name__ == "__main__":
    main()
