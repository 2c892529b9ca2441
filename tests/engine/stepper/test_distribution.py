"""The figures of a masked distribution repeat whichever thread computes them."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from app.engine.model.forward.base import RawDistribution
from app.engine.stepper.distribution import mask_distribution
from app.engine.tokens import Tokens

VOCAB = 49_152  # the default model's: long enough that torch splits a sum across threads


def _tokens() -> Tokens:
    data = tuple(f"t{i}".encode() for i in range(VOCAB))
    return Tokens(tokenizer=None, info=None, vocab_size=VOCAB, token_bytes=data,
                  stop_ids=frozenset(), special_ids=frozenset())  # fmt: skip


def test_the_blocked_mass_is_the_same_in_threads_of_different_widths() -> None:
    # A step runs in whichever thread leads its batch, and each thread fixes its torch threads
    # when it first runs an op: a back-and-step-again must give the same record in any of them.
    generator = torch.Generator().manual_seed(7)
    raw = RawDistribution(0.0, logits=torch.randn(VOCAB, generator=generator) * 4)
    assert raw.logits is not None
    probs = torch.softmax(raw.logits, -1).double()
    tokens = _tokens()

    def blocked_mass(allowed: np.ndarray, threads: int) -> float:
        torch.set_num_threads(threads)
        return mask_distribution(raw, allowed, tokens=tokens, top_k=10).blocked_mass

    before = torch.get_num_threads()
    rng = np.random.default_rng(7)
    try:
        for share in (0.1, 0.5, 0.9, 0.99):
            allowed = rng.random(VOCAB) < share
            masses = set()
            for threads in (1, 2, 4):
                with ThreadPoolExecutor(1) as pool:
                    masses.add(pool.submit(blocked_mass, allowed, threads).result())
            assert len(masses) == 1, (share, masses)
            assert abs(masses.pop() - float(probs[torch.from_numpy(~allowed)].sum())) < 1e-6
    finally:
        torch.set_num_threads(before)
