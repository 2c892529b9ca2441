"""Prompts computed once (``forward/batch.py``): a session that starts from a prompt the model
computed before gets a copy of its keys, values and logits, and records what the first did."""

from __future__ import annotations

import torch

from app.engine import Engine
from app.engine.model.forward.batch import Batcher
from tests.engine.conftest import nested_session


def test_a_second_session_on_the_same_prompt_reuses_it_and_records_the_same_steps(
    engine: Engine,
) -> None:
    counts = engine.model.batcher.counts
    first = nested_session(engine, max_tokens=6)
    first.run(6)
    reused = counts.prompts_reused
    second = nested_session(engine, max_tokens=6)
    second.run(6)
    assert counts.prompts_reused == reused + 1, "the second prompt was copied, not computed"
    for one, other in zip(first.steps, second.steps, strict=True):
        assert other.token_id == one.token_id and other.bitmask == one.bitmask
        assert [(t.token_id, t.logit) for t in other.top] == [
            (t.token_id, t.logit) for t in one.top
        ]
    second.back(len(second.steps))  # back to the prompt: a new cache, its prompt copied again
    again = second.step()
    assert counts.prompts_reused == reused + 2
    assert [t.logit for t in again.top] == [t.logit for t in first.steps[0].top]


def test_a_copied_prompt_holds_what_the_forward_pass_computed_and_its_budget_holds(
    engine: Engine,
) -> None:
    model = engine.model
    prompts = [list(range(100, 140)), list(range(200, 260))]
    sizes = []
    for ids in prompts:  # the bytes one prompt's copy takes: every layer's keys and values
        probe = Batcher(
            model.model, device=model.device, lock=model.lock, prompt_cache_bytes=1 << 30
        )
        probe.prefill(probe.new_cache(), ids)
        sizes.append(probe.prompt_cache_bytes)
    assert sizes[0] < sizes[1]
    batcher = Batcher(
        model.model, device=model.device, lock=model.lock, prompt_cache_bytes=sizes[1]
    )
    computed_cache = batcher.new_cache()
    computed = batcher.prefill(computed_cache, prompts[0])
    copied_cache = batcher.new_cache()
    copied = batcher.prefill(copied_cache, prompts[0])
    assert batcher.counts.prompts_reused == 1
    assert torch.equal(copied, computed)
    for mine, theirs in zip(copied_cache.layers, computed_cache.layers, strict=True):
        assert torch.equal(mine.keys, theirs.keys) and torch.equal(mine.values, theirs.values)
    # The copy is the session's own: a step on it leaves the kept prompt as it was.
    step = batcher.step(copied_cache, 5)
    assert torch.equal(batcher.step(computed_cache, 5), step)
    assert torch.equal(batcher.prefill(batcher.new_cache(), prompts[0]), computed)
    assert batcher.counts.prompts_reused == 2
    # A second prompt past the budget pushes the first out (least recently used).
    batcher.prefill(batcher.new_cache(), prompts[1])
    assert batcher.prompt_cache_bytes == sizes[1]
    batcher.prefill(batcher.new_cache(), prompts[0])
    assert batcher.counts.prompts_reused == 2, "the first prompt was dropped and computed again"
    off = Batcher(model.model, device=model.device, lock=model.lock, prompt_cache_bytes=0)
    off.prefill(off.new_cache(), prompts[0])
    off.prefill(off.new_cache(), prompts[0])
    assert off.counts.prompts_reused == 0 and off.prompt_cache_bytes == 0
