"""The ``request`` kind's use case: a pasted Chat Completions request, derived by a vLLM stack's
own code on the request model's tokenizer (:mod:`app.engine.grammars.request`)."""

from __future__ import annotations

from app.engine import AnyEngine
from app.engine.grammars.request import DerivedRequest, parse_request
from app.engine.grammars.tools.builders import builder
from app.engine.grammars.tools.vllm_builder import VllmBuilder
from app.engine.model.chat_templates import server_template
from app.engine.stack_pins import MASKSCOPE
from app.engine.stacks import runner
from app.web.runtime.state import AppState

__all__ = ["derive"]


async def derive(state: AppState, engine: AnyEngine, source: str, stack: str) -> DerivedRequest:
    """What ``stack`` (``maskscope``: the default vLLM stack, the tools builder's) makes of the
    request ``source`` on ``engine``'s tokenizer.

    The server's ``--chat-template`` is the source's ``chat_template``, else
    :func:`~app.engine.model.chat_templates.server_template`.

    Raises:
        GrammarError: the source or the body is invalid, or the stack refuses it (pointed into
            the source), or nothing in it is constrained.
        InvalidInput: no such stack.
    """
    parsed = await state.pools.parses.run(parse_request, source)
    stacked = builder("vllm") if stack == MASKSCOPE else runner(state.settings, stack)
    assert isinstance(stacked, VllmBuilder)
    shipped = getattr(getattr(engine.model, "spec", None), "tokenizer", None)
    template = server_template(engine.model.tokens, shipped=shipped)
    # waiting on the stack's process, as a compile waits on a worker's: the same bounded pool
    return await state.pools.compiles.run(stacked.derive, parsed, engine.tools.tokenizer, template)
