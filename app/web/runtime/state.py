"""What one app holds: settings, the engine (once loaded), live sessions, templates."""

from __future__ import annotations

import ctypes
import gc
import logging
from pathlib import Path
from typing import Any

from fastapi.templating import Jinja2Templates

from app.engine import AnyEngine, Engine
from app.engine.factories.remote import RemoteEngines
from app.engine.factories.tokenizer_only import PADDED_VOCAB, TokenizerModels, added_tokens_of
from app.engine.model.shipped_tokenizers import SHIPPED
from app.engine.stacks import close_runners
from app.exceptions import InvalidInput, NotReady
from app.sandbox.sandbox import Sandbox
from app.settings import LOCAL_MODEL_ID, Settings
from app.store import open_store
from app.web.runtime.executors import Pools
from app.web.runtime.metrics import ForwardFigures, Metrics, Watched
from app.web.runtime.quota import PermalinkQuota
from app.web.runtime.sessions import SessionStore
from app.web.runtime.stopping import Shutdown

__all__ = ["AppState", "STATIC_DIR", "TEMPLATES_DIR", "release_memory"]

log = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parents[3]  # app/web/runtime/ -> the checkout
STATIC_DIR = ROOT / "static"
TEMPLATES_DIR = ROOT / "templates"


def release_memory() -> None:
    """Collect garbage and return free heap pages to the system (glibc ``malloc_trim``)."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim
        pass


def _added(tokenizer: Any) -> list[dict[str, Any]]:
    return [token.to_dict() for token in added_tokens_of(tokenizer)]


class AppState:
    """Per-app state; the engine loads in a background thread so the server answers meanwhile.

    Args:
        settings: the app's settings.
        engine: an engine already loaded (tests share one); None to load it at startup.
    """

    def __init__(self, settings: Settings, engine: Engine | None = None) -> None:
        self.settings = settings
        # First: an unreachable database stops the start before any worker process is started.
        self.store = open_store(settings.store_url, max_bytes=settings.snapshot_max_bytes)
        self.engine = engine
        self.owns_engine = engine is None
        self.load_error: Exception | None = None
        self.remotes = RemoteEngines(settings)
        self.tokenizers = TokenizerModels(settings)
        self.pools = Pools.create(settings)
        self.sessions = SessionStore(
            settings.max_sessions,
            settings.session_ttl_s,
            settings.max_kv_mb * 1024 * 1024,
            max_sessions_per_client=settings.max_sessions_per_client,
            replica_id=settings.replica_id,
        )
        self.sandbox = Sandbox.from_settings(settings)
        self.permalink_quota = PermalinkQuota(
            settings.permalink_quota_per_minute, settings.permalink_quota_bytes
        )
        # The page's filters are installed by create_app (app/web/ui/render.py).
        self.templates = Jinja2Templates(directory=TEMPLATES_DIR)
        # SIGTERM (app/cli/serve.py): streams end after their step in flight, no new work is
        # taken, and the worker processes die, so the calls waiting for them end at once (the
        # sandbox's, process-wide, are serve's hook; the Doctor's go with the pools).
        self.shutdown = Shutdown()
        self.shutdown.add_hook("pools", self.pools.shutdown)
        self.shutdown.add_hook("compile workers", self._close_compiler)
        self.shutdown.add_hook("tokenizer models", self.tokenizers.close)
        self.metrics = Metrics(
            Watched(
                self.pools,
                self.sessions,
                self.remotes,
                ready=lambda: self.ready,
                stopping=lambda: self.shutdown.started,
                forward=self._forward_figures,
            )
        )

    def render(self, name: str, context: dict[str, Any]) -> str:
        """A template rendered to a string (fragments, stream events)."""
        return self.templates.get_template(name).render(context)

    def _forward_figures(self) -> ForwardFigures:
        """The local model's forward passes so far (none for a model without a batcher)."""
        batcher = getattr(self.engine.model, "batcher", None) if self.engine else None
        if batcher is None:
            return ForwardFigures()
        counts = batcher.counts
        return ForwardFigures(counts.batches, counts.rows, counts.prompts, counts.prompts_reused)

    @property
    def ready(self) -> bool:
        """Whether the model is loaded."""
        return self.engine is not None

    def load(self) -> None:
        """Load the engine (blocking); errors are kept and reported by ``/readyz``."""
        try:
            self.engine = Engine.load(self.settings)
            log.info("model loaded: %s", self.engine.model.identity.model_id)
        except Exception as error:  # reported on /readyz and by every engine route
            log.exception("the model failed to load")
            self.load_error = error
            return
        self.remotes.start(self.engine)

    def require_engine(self) -> Engine:
        """The engine, at once: a request never holds a thread waiting for the model to load.

        Raises:
            NotReady: it is still loading, or failed to load.
        """
        if self.engine is None:
            raise NotReady(f"{self._local_reason()}; try again when /readyz says ready")
        return self.engine

    def _local_reason(self) -> str:
        """Why the local model is not ready (while ``engine`` is None)."""
        return (
            f"the model failed to load: {self.load_error}"
            if self.load_error
            else ("the model is loading")
        )

    def is_configured(self, model_id: str) -> bool:
        """Whether ``model_id`` names the local model, a remote engine or a tokenizer-only model
        of the settings."""
        return (
            model_id == LOCAL_MODEL_ID
            or model_id in self.remotes.slots
            or model_id in self.tokenizers.slots
        )

    def engine_for(self, model_id: str) -> AnyEngine:
        """The engine a request names: ``local``, a remote engine's id, or a tokenizer-only
        model's (whose first use starts its load).

        Raises:
            InvalidInput: no model has this id here.
            NotReady: the model is loading, or the remote engine is not ready (with the reason).
        """
        if model_id == LOCAL_MODEL_ID:
            return self.require_engine()
        if not self.is_configured(model_id):
            known = ", ".join(
                map(repr, [LOCAL_MODEL_ID, *self.remotes.slots, *self.tokenizers.slots])
            )
            raise InvalidInput(
                f"no model {model_id!r} here; the models are {known}", pointer="/model"
            )
        if model_id in self.tokenizers.slots:
            return self.tokenizers.get(model_id)
        return self.remotes.get(model_id)

    def models(self) -> list[dict[str, Any]]:
        """``GET /api/models``: the local model, every remote engine and every tokenizer-only
        model, ready or not (why), each with its tokenizer's added tokens once loaded."""
        local = self.engine.model if self.engine is not None else None
        listed: list[dict[str, Any]] = [
            {
                "id": LOCAL_MODEL_ID,
                "kind": "local",
                "model": local.identity.model_id if local else self.settings.model,
                "tokenizer": local.identity.model_id if local else self.settings.model,
                "vocab_size": local.tokens.vocab_size if local else None,
                "url": None,
                "ready": local is not None,
                "reason": None if local else self._local_reason(),
                "added_tokens": _added(local.tokens.tokenizer) if local else None,
            }
        ]
        for slot in self.remotes.slots.values():
            ready = slot.engine is not None
            listed.append(
                {
                    "id": slot.spec.id,
                    "kind": "remote",
                    "model": slot.spec.model,
                    "tokenizer": slot.spec.tokenizer,
                    "vocab_size": slot.engine.model.tokens.vocab_size if slot.engine else None,
                    "url": slot.spec.url,
                    "ready": ready,
                    "reason": None if ready else slot.reason,
                    "added_tokens": (
                        _added(slot.engine.model.tokens.tokenizer) if slot.engine else None
                    ),
                }
            )
        return listed + self._tokenizer_models()

    def _tokenizer_models(self) -> list[dict[str, Any]]:
        """The ``GET /api/models`` entries of the tokenizer-only models (none is loaded here)."""
        listed: list[dict[str, Any]] = []
        for model_id, slot in self.tokenizers.slots.items():
            spec, loaded = slot.spec, slot.engine.model if slot.engine else None
            shipped = SHIPPED.get(spec.tokenizer)
            listed.append(
                {
                    "id": model_id,
                    "kind": "tokenizer",
                    "model": shipped.model if shipped else spec.tokenizer,
                    "tokenizer": shipped.package if shipped else spec.tokenizer,
                    "vocab_size": (
                        loaded.tokens.vocab_size
                        if loaded
                        else spec.vocab_size or PADDED_VOCAB.get(spec.tokenizer)
                    ),
                    "url": None,
                    "ready": loaded is not None,
                    "reason": None if loaded else self.tokenizers.reason(model_id),
                    "added_tokens": [t.to_dict() for t in loaded.added_tokens] if loaded else None,
                }
            )
        return listed

    def _close_compiler(self) -> None:
        """Kill the local engine's compile workers, when this app owns the engine."""
        if self.owns_engine and self.engine is not None:
            self.engine.compiler.close()

    def close(self) -> None:
        """Stop what this app started."""
        self.pools.shutdown()
        self.remotes.close()
        self.tokenizers.close()
        self.store.close()
        if self.owns_engine:
            # The server's own process (it loaded its engine): the stacks' runners it started
            # stop with it, rather than idling out (apps given an engine share its process).
            close_runners()
            if self.engine is not None:
                self.engine.close()
