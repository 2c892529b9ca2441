"""An engine over the toy forward model (``tests/engine/toy_forward.py``) for the web tests whose
point is not the real model: 4xx validation, limits, forms, rendering, permalink round trips.

The engine is a real :class:`~app.engine.Engine`: the toy model plugs in through the public
``Engine(model, compiler, settings)`` constructor (a ``ServingModel`` with a forward engine per
session), and its grammars compile in real xgrammar compile workers for the toy vocabulary, so
every mask is a real one. It starts in about a second and loads no torch model: the tests on
it run in the fast tier (``make test-fast``, docs/testing.md).

What it says nothing about: the real model's tokens, probabilities or chat template. A test
that checks those uses the ``engine`` fixture (and is marked ``model``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from app.engine import Engine, GrammarCompiler
from app.settings import Settings
from tests.engine.toy_forward import END, EOS, VOCAB, ToyModel

__all__ = ["ToyChatTokenizer", "toy_chat_model", "toy_engine"]

#: What a character outside the toy vocabulary is encoded as (the toy model has no byte
#: fallback): texts keep their length in tokens, which the limits count.
_UNKNOWN = VOCAB.index("x")


class ToyChatTokenizer:
    """The toy vocabulary's tokenizer with a chat template: greedy longest-match encoding of any
    text (a character outside the vocabulary is ``x``), and messages rendered as
    ``{role}: {content}`` lines.
    """

    chat_template = "{role}: {content}"
    all_special_ids = (EOS, END)
    name_or_path = "toy"

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of ``text``, longest match first."""
        ids: list[int] = []
        while text:
            matches = [i for i, t in enumerate(VOCAB) if i not in (EOS, END) and text.startswith(t)]
            if not matches:
                ids.append(_UNKNOWN)
                text = text[1:]
                continue
            best = max(matches, key=lambda i: len(VOCAB[i]))
            ids.append(best)
            text = text[len(VOCAB[best]) :]
        return ids

    def apply_chat_template(
        self,
        messages: Sequence[dict[str, str]],
        *,
        tokenize: bool = False,
        add_generation_prompt: bool = True,
    ) -> str:
        """The messages as ``role: content`` lines (and the assistant's turn)."""
        lines = [self.chat_template.format(**message) for message in messages]
        if add_generation_prompt:
            lines.append("assistant: ")
        return "\n".join(lines)

    def decode(self, ids: Sequence[int], **_: Any) -> str:
        """The text of ``ids`` (the stop tokens are empty)."""
        return "".join(VOCAB[i] for i in ids if i not in (EOS, END))


def toy_chat_model() -> ToyModel:
    """The toy model, its tokenizer given a chat template."""
    model = ToyModel()
    model.tokens = dataclasses.replace(model.tokens, tokenizer=ToyChatTokenizer())
    return model


def toy_engine(settings: Settings) -> Engine[Any]:
    """An engine on :func:`toy_chat_model` with one real xgrammar compile worker."""
    model = toy_chat_model()
    return Engine(model, GrammarCompiler(model.tokens.info, workers=1), settings)
