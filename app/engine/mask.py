"""Reading the packed token bitmask xgrammar fills: one bit per token, 32 tokens per int32 word."""

from __future__ import annotations

import numpy as np
import torch

__all__ = [
    "allowed_array",
    "allowed_vector",
    "bitmask_bytes",
    "count_allowed",
    "is_allowed",
    "new_bitmask",
    "words_from_bytes",
]

_SHIFTS: dict[torch.device, torch.Tensor] = {}


def new_bitmask(vocab_size: int) -> torch.Tensor:
    """A ``(1, ceil(vocab_size / 32))`` int32 CPU tensor for a masking engine to fill."""
    return torch.full((1, (vocab_size + 31) // 32), -1, dtype=torch.int32)


def allowed_vector(words: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Unpack one row of bitmask words into a bool vector of length ``vocab_size``."""
    shifts = _SHIFTS.get(words.device)
    if shifts is None:
        shifts = _SHIFTS[words.device] = torch.arange(32, dtype=torch.int32, device=words.device)
    return ((words.unsqueeze(-1) >> shifts) & 1).reshape(-1)[:vocab_size].bool()


def count_allowed(words: torch.Tensor, vocab_size: int) -> int:
    """How many of the first ``vocab_size`` bits are set in one row of bitmask words (on the CPU).

    A popcount of the words: unpacking them into a vector costs about 20 times more.
    """
    bits = words.numpy().view(np.uint32)
    full, rest = divmod(vocab_size, 32)
    count = int(np.bitwise_count(bits[:full]).sum())
    if rest:
        count += int(np.bitwise_count(bits[full] & np.uint32((1 << rest) - 1)))
    return count


def allowed_array(words: torch.Tensor, vocab_size: int) -> np.ndarray:
    """Like :func:`allowed_vector` for words on the CPU, as numpy bools.

    numpy unpacks in one thread: torch splits this size of work across its thread pool, whose
    wake-ups cost milliseconds on a busy machine.
    """
    bits = np.unpackbits(words.numpy().view(np.uint8), bitorder="little")
    return bits[:vocab_size].view(np.bool_)


def is_allowed(words: torch.Tensor, token_id: int) -> bool:
    """Whether bit ``token_id`` is set in one row of bitmask words (on the CPU)."""
    return bool((int(words[token_id >> 5]) >> (token_id & 31)) & 1)


def bitmask_bytes(words: torch.Tensor) -> bytes:
    """The words as little-endian int32 bytes, exactly as xgrammar filled them."""
    return words.numpy().astype("<i4", copy=False).tobytes()


def words_from_bytes(data: bytes) -> np.ndarray:
    """Inverse of :func:`bitmask_bytes`."""
    return np.frombuffer(data, dtype="<i4")
