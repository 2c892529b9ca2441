"""The hard caps on what one request may ask, spelled once.

The request bodies declare them (so OpenAPI and fuzzers see them), the settings take them as the
upper bound of what an operator may configure (settings can lower a cap, never raise it), and the
query parameters that index steps use them too. The contract states the same figures.
"""

from __future__ import annotations

__all__ = [
    "MAX_ACTIONS",
    "MAX_DRAFT_TOKENS",
    "MAX_LOG_LINE",
    "MAX_MESSAGES_BYTES",
    "MAX_REPLAY_TOKENS",
    "MAX_SEED",
    "MAX_SOURCE_BYTES",
    "MAX_STEP_COUNT",
    "MAX_TESTS",
    "MAX_TEXT_BYTES",
    "MAX_TOKENS",
    "MAX_TOKEN_ID",
    "MAX_TOP_K",
]

#: The most tokens one session generates (``max_tokens``); a step index lies below it.
MAX_TOKENS = 4096
#: The most steps one call takes or undoes (``n``).
MAX_STEP_COUNT = 512
#: The largest grammar source, and the largest text to replay, in UTF-8 bytes.
MAX_SOURCE_BYTES = 256 * 1024
#: The largest prompt (every message and the raw prompt together), in UTF-8 bytes.
MAX_MESSAGES_BYTES = 32 * 1024
#: The most speculative drafts validated before each step (``draft_tokens``).
MAX_DRAFT_TOKENS = 16
#: The most alternatives a step lists (``top_k``).
MAX_TOP_K = 100
#: The most token ids one replay walks through.
MAX_REPLAY_TOKENS = 8192
#: The most actions one permalink's trace holds.
MAX_ACTIONS = 4096
#: The largest token id a request may name.
MAX_TOKEN_ID = 2**31 - 1
#: The largest sampling (or witness search) seed.
MAX_SEED = 2**63 - 1
#: The most schema unit tests one run (and one permalink) holds.
MAX_TESTS = 100
#: The largest text of one schema unit test, in UTF-8 bytes.
MAX_TEXT_BYTES = 64 * 1024
#: The longest vLLM log line a replay reads its ids from (a batch of thousands of ids fits).
MAX_LOG_LINE = 64 * 1024
