"""Models known by their tokenizer only (``MASKSCOPE_TOKENIZERS``): a production tokenizer to
compile, replay, test, examine and export with, and no forward pass.

A log line's token ids mean something only under the production model's tokenizer; loading the
tokenizer is enough to replay them, so no weights (and no server) are needed.
"""

from __future__ import annotations

import importlib.metadata
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import torch

from app.engine.engine import Engine
from app.engine.grammars.compiler import GrammarCompiler
from app.engine.model.forward.base import ModelIdentity
from app.engine.model.loading import stop_ids_of
from app.engine.model.shipped_tokenizers import SHIPPED, tokenizer_dir
from app.engine.tokens import Tokens
from app.exceptions import ModelLoadError, NoForwardEngine, NotReady
from app.redact import hide_paths
from app.settings import Settings, TokenizerSpec

__all__ = [
    "PADDED_VOCAB",
    "AddedToken",
    "TokenizerModel",
    "TokenizerModels",
    "added_tokens_of",
    "load_tokenizer_model",
    "open_tokenizer",
]

#: The shipped tokenizers' models' padded vocabularies (``config.vocab_size``, the logits' and
#: the bitmask's width): transformers' ``DeepseekV4Config`` and ``Qwen3_5Config`` defaults
#: (Qwen3.6's model card: "Token Embedding: 248320 (Padded)"). vLLM sizes the grammar bitmask
#: with it; the ids past the tokenizer are padding, never allowed.
PADDED_VOCAB = {"deepseek-v4": 129_280, "qwen3.6": 248_320}


@dataclass(frozen=True, slots=True)
class AddedToken:
    """A token of the tokenizer's ``added_tokens_decoder``.

    ``special`` is the tokenizer's own flag: DeepSeek V4's ``<think>`` and tool markers are
    added tokens with ``special=False`` (``all_special_tokens`` misses them).
    """

    id: int
    content: str
    special: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"id": self.id, "content": self.content, "special": self.special}


def added_tokens_of(tokenizer: Any) -> tuple[AddedToken, ...]:
    """The tokenizer's added tokens, by id."""
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    return tuple(
        AddedToken(int(i), str(t.content), bool(t.special)) for i, t in sorted(decoder.items())
    )


@dataclass
class TokenizerModel:
    """A tokenizer standing for a model: sessions are refused, everything else works.

    Attributes:
        spec: its entry in ``MASKSCOPE_TOKENIZERS`` (or the shipped default).
        tokens: the tokenizer with xgrammar's view of it, at the model's padded vocabulary.
        identity: the id, the tokenizer's hash and the library versions.
        added_tokens: the tokenizer's added tokens, with their ``special`` flag.
    """

    spec: TokenizerSpec
    tokens: Tokens
    identity: ModelIdentity
    added_tokens: tuple[AddedToken, ...]

    def open_forward(self, prompt_ids: Sequence[int]) -> NoReturn:
        """Refused: there is no model to run.

        Raises:
            NoForwardEngine: always.
        """
        self.refuse_session()

    def refuse_session(self) -> NoReturn:
        """Refuse a session before anything is compiled or rendered (``Engine.new_session``).

        Raises:
            NoForwardEngine: always.
        """
        raise NoForwardEngine(
            f"model {self.spec.id!r} is a tokenizer only (MASKSCOPE_TOKENIZERS): it compiles, "
            "replays, tests, examines and exports, but runs no session; pick the local model "
            "or a remote engine",
            pointer="/model",
        )

    def close(self) -> None:
        """Nothing to release."""


def _directory(spec: TokenizerSpec, cache_dir: Path) -> Path:
    if spec.tokenizer in SHIPPED:
        return tokenizer_dir(spec.tokenizer, cache_dir)
    path = Path(spec.tokenizer).expanduser()
    if not path.is_dir():
        raise ModelLoadError(
            f"tokenizer {spec.id!r}: {spec.tokenizer!r} is neither a directory nor a shipped "
            f"tokenizer ({', '.join(SHIPPED)})"
        )
    return path


def _config_vocab(directory: Path) -> int | None:
    try:
        config = json.loads((directory / "config.json").read_text())
    except (OSError, ValueError):
        return None
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    size = text.get("vocab_size")
    return int(size) if isinstance(size, int) else None


def _stop_ids(spec: TokenizerSpec, tokenizer: Any, directory: Path) -> list[int]:
    if spec.stop_token_ids is not None:
        return sorted(set(spec.stop_token_ids))
    shipped = SHIPPED.get(spec.tokenizer)
    if shipped is not None:
        ids = tokenizer.convert_tokens_to_ids(list(shipped.stop_tokens))
        return sorted({int(i) for i in ids if i is not None})
    from transformers import AutoConfig, GenerationConfig

    configs: list[Any] = []
    for kind in (AutoConfig, GenerationConfig):
        try:
            configs.append(kind.from_pretrained(directory))
        except (OSError, ValueError):  # a tokenizer-only directory: the tokenizer's EOS
            configs.append(None)
    return stop_ids_of(configs[0], configs[1], tokenizer)


def load_tokenizer_model(spec: TokenizerSpec, cache_dir: Path) -> TokenizerModel:
    """Load ``spec``'s tokenizer (converting a shipped Qwen tokenizer once, about 10 s).

    Raises:
        ModelLoadError: the tokenizer cannot be found or loaded, or ``vocab_size`` is below
            its length.
    """
    from transformers import AutoTokenizer

    directory = _directory(spec, cache_dir)
    try:
        tokenizer = AutoTokenizer.from_pretrained(directory)
    except (OSError, ValueError) as error:
        message = f"tokenizer {spec.id!r}: cannot load {directory}: {error}"
        named = [(cache_dir, "<cache_dir>"), (directory, directory.name)]
        raise ModelLoadError(hide_paths(message, named)) from error
    vocab_size = (
        spec.vocab_size
        or PADDED_VOCAB.get(spec.tokenizer)
        or _config_vocab(directory)
        or len(tokenizer)
    )
    if vocab_size < len(tokenizer):
        raise ModelLoadError(
            f"tokenizer {spec.id!r}: vocab_size {vocab_size} is below the tokenizer's "
            f"{len(tokenizer)} ids"
        )
    stop_ids = _stop_ids(spec, tokenizer, directory)
    bad = [i for i in stop_ids if not 0 <= i < vocab_size]
    if bad:
        raise ModelLoadError(
            f"tokenizer {spec.id!r}: stop_token_ids {bad} are outside 0..{vocab_size - 1}"
        )
    tokens = Tokens.from_tokenizer(tokenizer, vocab_size, stop_ids)
    identity = ModelIdentity(
        model_id=spec.id,
        weights_sha256=None,
        xgrammar=importlib.metadata.version("xgrammar"),
        transformers=importlib.metadata.version("transformers"),
        torch=torch.__version__,
        served_name=spec.id,
        tokenizer_sha256=tokens.sha256,
    )
    return TokenizerModel(spec, tokens, identity, added_tokens_of(tokenizer))


def _open(spec: TokenizerSpec, settings: Settings) -> Engine[TokenizerModel]:
    model = load_tokenizer_model(spec, settings.cache_dir)
    return Engine(model, GrammarCompiler.from_settings(model.tokens.info, settings), settings)


def open_tokenizer(settings: Settings, model_id: str) -> Engine[TokenizerModel] | None:
    """The tokenizer-only model ``model_id`` of the settings, loaded now with a compiler of its
    own (the command line); None when the settings list no such model.

    Raises:
        ModelLoadError: its tokenizer cannot be loaded.
    """
    spec = next((s for s in settings.tokenizer_models if s.id == model_id), None)
    return None if spec is None else _open(spec, settings)


@dataclass
class _Slot:
    spec: TokenizerSpec
    engine: Engine[TokenizerModel] | None = None
    error: str | None = None
    loading: threading.Thread | None = None


class TokenizerModels:
    """The tokenizer-only models of the settings, each loaded on first use, in the background.

    A request naming one that is not loaded starts its load and is answered 503 ``not_ready``
    at once (the page polls ``/api/models`` and recompiles when it is ready); nothing waits on
    the event loop. :meth:`wait` loads it in the caller's thread (the command line, tests).

    Args:
        settings: the specs, the cache directory, and the compile settings.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.slots = {spec.id: _Slot(spec) for spec in settings.tokenizer_models}
        self._lock = threading.Lock()

    def _load(self, slot: _Slot) -> None:
        try:
            slot.engine = _open(slot.spec, self.settings)
        except Exception as error:  # kept, and reported by /api/models and every request
            slot.error = getattr(error, "message", None) or str(error)

    def get(self, model_id: str) -> Engine[TokenizerModel]:
        """The loaded engine ``model_id``.

        Raises:
            KeyError: no tokenizer-only model has this id.
            NotReady: it is loading (the first request starts the load), or failed to.
        """
        slot = self.slots[model_id]
        if slot.engine is not None:
            return slot.engine
        with self._lock:
            if slot.loading is None:
                slot.loading = threading.Thread(
                    target=self._load, args=(slot,), name=f"tokenizer-{model_id}", daemon=True
                )
                slot.loading.start()
        raise NotReady(self.reason(model_id))

    def wait(self, model_id: str) -> Engine[TokenizerModel]:
        """The engine ``model_id``, loading it now if need be.

        Raises:
            KeyError: no tokenizer-only model has this id.
            NotReady: it failed to load, with the reason.
        """
        try:
            return self.get(model_id)
        except NotReady:
            pass
        thread = self.slots[model_id].loading
        if thread is not None:
            thread.join()
        return self.get(model_id)

    def reason(self, model_id: str) -> str:
        """Why ``model_id`` is not ready."""
        slot = self.slots[model_id]
        if slot.error is not None:
            return f"tokenizer {model_id!r} failed to load: {slot.error}"
        if slot.loading is None:
            return f"tokenizer {model_id!r} loads on first use"
        return f"tokenizer {model_id!r} is loading (a few seconds, once); try again shortly"

    def close(self) -> None:
        """Close the loaded engines (their compile workers)."""
        for slot in self.slots.values():
            if slot.engine is not None:
                slot.engine.close()
