"""The tokenizer as the engine sees it: ids to raw bytes and display text, stop tokens."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

__all__ = ["Tokens"]


@dataclass(frozen=True)
class Tokens:
    """A tokenizer with xgrammar's view of it.

    Attributes:
        tokenizer: the Hugging Face tokenizer (chat template, encoding).
        info: the ``xgrammar.TokenizerInfo`` built for ``vocab_size``.
        vocab_size: the model's ``config.vocab_size``: the logits' width and the bitmask's size.
            It can exceed the tokenizer's length (ids beyond it are padding, always blocked).
        token_bytes: raw bytes of every id as xgrammar decodes them (``b""`` for padding ids).
        stop_ids: the ids that end generation (the model's EOS tokens).
        special_ids: ids of special tokens, which are not part of the output text.
    """

    tokenizer: Any
    info: Any
    vocab_size: int
    token_bytes: tuple[bytes, ...]
    stop_ids: frozenset[int]
    special_ids: frozenset[int]

    @classmethod
    def from_tokenizer(cls, tokenizer: Any, vocab_size: int, stop_ids: Sequence[int]) -> Tokens:
        """Build the xgrammar tokenizer info and the id -> bytes table once."""
        import xgrammar as xgr

        info = xgr.TokenizerInfo.from_huggingface(
            tokenizer, vocab_size=vocab_size, stop_token_ids=list(stop_ids)
        )
        decoded = list(info.decoded_vocab)[:vocab_size]
        decoded += [b""] * (vocab_size - len(decoded))
        special = set(getattr(tokenizer, "all_special_ids", [])) | set(stop_ids)
        return cls(
            tokenizer=tokenizer,
            info=info,
            vocab_size=vocab_size,
            token_bytes=tuple(decoded),
            stop_ids=frozenset(stop_ids),
            special_ids=frozenset(i for i in special if 0 <= i < vocab_size),
        )

    @cached_property
    def sha256(self) -> str:
        """A content hash of the tokenizer as the mask sees it: every id's bytes, the
        vocabulary size, the stop and special ids, and the chat template. Two tokenizers with
        the same hash give the same masks, prompts and stop reasons."""
        digest = hashlib.sha256(f"{self.vocab_size}\0".encode())
        for data in self.token_bytes:
            digest.update(len(data).to_bytes(4, "little") + data)
        for ids in (self.stop_ids, self.special_ids):
            digest.update(b"\0" + ",".join(map(str, sorted(ids))).encode())
        template = getattr(self.tokenizer, "chat_template", None)
        digest.update(b"\0" + str(template or "").encode())
        return digest.hexdigest()

    def text(self, token_id: int) -> str:
        """The token as text; bytes that are not whole UTF-8 characters show as U+FFFD."""
        return self.token_bytes[token_id].decode("utf-8", errors="replace")

    def output_bytes(self, token_id: int) -> bytes:
        """What the token adds to the generated text (special tokens add nothing)."""
        return b"" if token_id in self.special_ids else self.token_bytes[token_id]

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` with no special tokens added."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def shortest_texts(self, token_ids: Iterable[int], limit: int = 20) -> list[str]:
        """Up to ``limit`` distinct texts of ``token_ids``, shortest first: what may come next."""
        ranked = sorted(token_ids, key=lambda i: (len(self.token_bytes[i]), i))
        texts: list[str] = []
        for token_id in ranked:
            text = self.text(token_id)
            if text not in texts:
                texts.append(text)
                if len(texts) == limit:
                    break
        return texts
