from __future__ import annotations

import pytest
import torch

from app.engine.model.sampling import SamplingParams, choose_token, draw
from app.exceptions import InvalidInput

NEG = float("-inf")


def test_greedy_takes_the_highest_allowed_logit() -> None:
    logits = torch.tensor([1.0, NEG, 3.0, 2.0])
    assert choose_token(logits, SamplingParams(), 0) == 2


def test_the_draw_depends_only_on_seed_and_index() -> None:
    assert draw(7, 3) == draw(7, 3)
    assert draw(7, 3) != draw(7, 4)
    assert draw(7, 3) != draw(8, 3)
    assert 0.0 <= draw(123, 0) < 1.0


def test_sampling_never_picks_a_blocked_token() -> None:
    logits = torch.tensor([NEG, 0.0, NEG, 0.0, NEG])
    params = SamplingParams(temperature=1.0, seed=1)
    chosen = {choose_token(logits, params, i) for i in range(200)}
    assert chosen == {1, 3}


def test_top_p_keeps_the_smallest_prefix_reaching_p() -> None:
    # probabilities 0.5, 0.3, 0.2: top_p 0.6 keeps the first two only
    logits = torch.log(torch.tensor([0.5, 0.3, 0.2]))
    params = SamplingParams(temperature=1.0, top_p=0.6, seed=3)
    chosen = [choose_token(logits, params, i) for i in range(300)]
    assert set(chosen) == {0, 1}
    share = chosen.count(0) / len(chosen)
    assert 0.5 < share < 0.75  # renormalised: 0.5 / 0.8 = 0.625


def test_sampling_is_repeatable() -> None:
    logits = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    params = SamplingParams(temperature=0.8, top_p=0.9, seed=42)
    first = [choose_token(logits, params, i) for i in range(50)]
    assert first == [choose_token(logits, params, i) for i in range(50)]
    assert len(set(first)) > 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": -1.0}, "temperature must be between 0 and 10, got -1.0"),
        ({"top_p": 0.0}, "top_p must be in (0, 1], got 0.0"),
        ({"seed": -5}, "seed must be between 0 and 2**63 - 1, got -5"),
    ],
)
def test_invalid_parameters_are_named(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        SamplingParams(**kwargs)  # type: ignore[arg-type]
    assert caught.value.message == message


def test_a_missing_seed_is_replaced_by_a_random_one() -> None:
    seeds = {SamplingParams.create(1.0, 1.0, None).seed for _ in range(5)}
    assert len(seeds) > 1
    assert SamplingParams.create(seed=9).seed == 9


def test_sampling_makes_its_tensors_on_the_logits_device() -> None:
    # Regression: the top-p cut compared CUDA logits with a CPU scalar and failed on a GPU.
    # With another default device, any tensor not made on the logits' device shows up here.
    logits = torch.linspace(-3.0, 3.0, 64)
    params = SamplingParams(temperature=0.8, top_p=0.9, seed=5)
    expected = [choose_token(logits, params, i) for i in range(20)]
    with torch.device("meta"):
        assert [choose_token(logits, params, i) for i in range(20)] == expected
    assert len(set(expected)) > 1
