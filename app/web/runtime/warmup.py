"""First use without the wait: what loads on first use, started in the background once the model
is loaded (issue 45, item 3).

The tokenizer-only models load on their first pick (30-41 s for the shipped ones, most of it
converting Qwen's ranks once), and vLLM's tools builder starts vLLM's code on its first list or
compile (10-30 s); a tokenizer's first compile also starts its compiler (seconds more), and the
vLLM builder's first compile on a tokenizer starts its runner and loads that tokenizer there
(15.5 s on qwen3.6). All of it starts here after the local model is loaded, each in its own
thread, so that the first page never waits for it and a first use finds it ready.
"""

from __future__ import annotations

import json
import logging
import threading

from app.engine.grammars.spec import GrammarKind, GrammarSpec
from app.engine.grammars.tools.builders import tool_formats
from app.exceptions import MaskscopeError
from app.web.runtime.state import AppState

__all__ = ["VLLM_FIRST", "VLLM_TOKENIZER", "warm_up"]

log = logging.getLogger(__name__)


#: A grammar so small its compile costs nothing but the compiler's own start (its worker and
#: the tokenizer's info), which is what a first compile on a fresh tokenizer waits for.
_FIRST = GrammarSpec(GrammarKind.JSON_SCHEMA, '{"type": "string"}')


#: The shipped tokenizer vLLM's tools builder is warmed on: the production case (a Qwen served
#: by vLLM with its hermes tool parser).
VLLM_TOKENIZER = "qwen3.6"
#: A tools source so small its compile costs nothing but the vLLM builder's start on a tokenizer
#: (its runner, vLLM's imports, the tokenizer loaded there): what its first compile waits for.
VLLM_FIRST = GrammarSpec(
    GrammarKind.TOOLS,
    json.dumps({
        "builder": "vllm",
        "format": "hermes",
        "tools": [{"type": "function",
                   "function": {"name": "ping", "parameters": {"type": "object"}}}],
    }),
)  # fmt: skip


def _ready(state: AppState, model_id: str) -> None:
    """The tokenizer loaded, then its compiler started by one tiny compile (and, on
    :data:`VLLM_TOKENIZER`, the vLLM builder by another)."""
    try:
        engine = state.tokenizers.wait(model_id)
        engine.compile(_FIRST)
        if state.tokenizers.slots[model_id].spec.tokenizer == VLLM_TOKENIZER:
            engine.compile(VLLM_FIRST)
    except MaskscopeError as error:  # reported where its first use looks, as without warm-up
        log.info("warm-up of %s stopped: %s", model_id, error)


def warm_up(state: AppState) -> None:
    """Start every tokenizer-only model's load (and its compiler), vLLM's tools builder, and
    its first compile on :data:`VLLM_TOKENIZER` when that model is configured; returns at once
    (each runs in its own thread, its errors reported where a first use would see them)."""
    for model_id in state.tokenizers.slots:
        threading.Thread(
            target=_ready, args=(state, model_id), name=f"warm-{model_id}", daemon=True
        ).start()
    tool_formats(wait=False)  # vLLM's formats are read by starting its code, in a thread
    log.info("warming up: %d tokenizer models, the tools builders", len(state.tokenizers.slots))
