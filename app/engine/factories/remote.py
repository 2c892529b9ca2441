"""The configured remote engines, each connected in the background and retried until ready."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from app.engine.engine import Engine
from app.engine.grammars.compiler import GrammarCompiler
from app.engine.model.loading import LoadedModel
from app.engine.model.remote.model import RemoteModel, connect
from app.exceptions import InvalidInput, NotReady
from app.settings import RemoteEngineSpec, Settings

__all__ = ["RemoteEngines", "RemoteSlot", "open_remote"]

log = logging.getLogger(__name__)


@dataclass
class RemoteSlot:
    """One configured remote engine: ready (``engine``) or not, and why.

    Attributes:
        spec: its entry in ``MASKSCOPE_REMOTE_ENGINES``.
        engine: the engine once the start-up check passed.
        reason: why it is not ready (the last check's failure), while ``engine`` is None.
    """

    spec: RemoteEngineSpec
    engine: Engine[RemoteModel] | None = None
    reason: str = ""

    def __post_init__(self) -> None:
        self.reason = self.reason or f"remote engine {self.spec.id!r} is connecting"


class RemoteEngines:
    """Every remote engine of the settings, keyed by id.

    :meth:`start` checks each server on a thread of its own; a failed check marks the engine
    not ready with its reason and is retried every ``retry_s`` until it passes (a server that
    starts after Maskscope, or comes back). Grammars compile with the local engine's compiler
    when the tokenizers are the same (the same hash), else with a compiler of the engine's own.

    Args:
        settings: the remote engines, their request timeout, and the compile settings.
        retry_s: the wait between two failed checks.
    """

    def __init__(self, settings: Settings, *, retry_s: float = 10.0) -> None:
        self.settings = settings
        self.retry_s = retry_s
        self.slots = {spec.id: RemoteSlot(spec) for spec in settings.remote_engines}
        self._closed = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self, local: Engine[LoadedModel]) -> None:
        """Connect every engine in the background (a no-op when none is configured)."""
        for slot in self.slots.values():
            thread = threading.Thread(
                target=self._connect, args=(slot, local), name=f"remote-{slot.spec.id}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def _connect(self, slot: RemoteSlot, local: Engine[LoadedModel]) -> None:
        while not self._closed.is_set():
            try:
                model = connect(slot.spec, timeout_s=self.settings.remote_timeout_s)
            except NotReady as error:
                slot.reason = error.message
                log.warning("%s; retrying in %g s", error.message, self.retry_s)
                self._closed.wait(self.retry_s)
                continue
            compiler = self._compiler_for(model, local)
            slot.engine = Engine(
                model, compiler, self.settings, owns_compiler=compiler is not local.compiler
            )
            log.info(
                "remote engine %r ready: vLLM %s, %s",
                slot.spec.id,
                model.facts.version,
                "whole vocabulary"
                if model.logprobs_per_step is None
                else f"top-{model.logprobs_per_step}",
            )
            return

    def _compiler_for(self, model: RemoteModel, local: Engine[LoadedModel]) -> GrammarCompiler:
        if model.tokens.sha256 == local.model.tokens.sha256:
            return local.compiler
        return GrammarCompiler.from_settings(model.tokens.info, self.settings)

    def get(self, engine_id: str) -> Engine[RemoteModel]:
        """The ready engine ``engine_id``.

        Raises:
            KeyError: no remote engine has this id.
            NotReady: it is not ready (yet), with the reason.
        """
        slot = self.slots[engine_id]
        if slot.engine is None:
            raise NotReady(slot.reason)
        return slot.engine

    def close(self) -> None:
        """Stop retrying and close the engines (their clients and their own compilers; the
        local engine's compiler they share is the local engine's to close)."""
        self._closed.set()
        for thread in self._threads:  # a check in flight ends at its timeout; not waited for
            thread.join(timeout=1.0)
        for slot in self.slots.values():
            if slot.engine is not None:
                slot.engine.close()


def open_remote(settings: Settings, engine_id: str) -> Engine[RemoteModel]:
    """The remote engine ``engine_id`` of the settings, checked once, with a compiler of its own
    (the command line: no local model is loaded). :meth:`Engine.close` closes both.

    Raises:
        InvalidInput: the settings name no remote engine ``engine_id``.
        NotReady: its check failed, with the reason.
    """
    spec = next((s for s in settings.remote_engines if s.id == engine_id), None)
    if spec is None:
        known = ", ".join(repr(s.id) for s in settings.remote_engines) or "none"
        raise InvalidInput(
            f"no remote engine {engine_id!r} in MASKSCOPE_REMOTE_ENGINES (configured: {known})"
        )
    model = connect(spec, timeout_s=settings.remote_timeout_s)
    return Engine(model, GrammarCompiler.from_settings(model.tokens.info, settings), settings)
