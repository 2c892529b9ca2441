"""The sandbox's front door: containment level, check, run (bounded concurrency), cache."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from app.exceptions import PydanticFailed, SandboxUnconfined
from app.sandbox.check import CheckedSource, check_source
from app.sandbox.contain import Level
from app.sandbox.process import Cancel, Limits, malformed, probe, run_child
from app.settings import Settings
from app.verdicts import Validation, ValidationError

__all__ = ["PydanticSchema", "Sandbox"]

log = logging.getLogger(__name__)

# Two parses at once interrupt each other in CPython 3.11 (app.pysource tries again): the
# static checks (milliseconds each) run one at a time, so only other threads' parses race them.
_CHECKING = threading.Lock()


@dataclass(frozen=True)
class PydanticSchema:
    """What pydantic derived from a source: the root model's JSON Schema and the models found.

    ``ran`` is the source the sandbox ran (its methods removed, ``stripped`` names them): what an
    export may show, never the text as submitted.
    """

    schema: dict[str, Any]
    models: tuple[str, ...]
    root: str
    stripped: tuple[str, ...] = ()
    ran: str = ""


class Sandbox:
    """Runs Pydantic sources in limited, kernel-contained processes, a few at a time.

    The containment level is probed once (a sandbox process started with nothing to run), on
    first use or at the app's start; below ``allow``, Pydantic sources are refused.

    Args:
        limits: CPU, memory, output size and wall-clock limits of one run.
        workers: runs at once; more wait their turn.
        cache_size: derived schemas kept (a source's schema never changes).
        allow: the weakest containment level accepted.
    """

    def __init__(
        self,
        limits: Limits | None = None,
        *,
        workers: int = 4,
        cache_size: int = 256,
        allow: Level = Level.FULL,
    ):
        self.limits = limits or Limits()
        self.allow = allow
        self._slots = threading.BoundedSemaphore(workers)
        self._cache: OrderedDict[tuple[str, str | None], PydanticSchema] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self._probed: tuple[Level, str] | None = None
        self._runs = 0
        self._running: list[Cancel] = []

    @classmethod
    def from_settings(cls, settings: Settings) -> Sandbox:
        """The sandbox the settings describe (limits, workers, the weakest level allowed)."""
        limits = Limits(
            cpu_s=settings.sandbox_cpu_s,
            memory_bytes=settings.sandbox_memory_mb * 1024 * 1024,
            wall_s=settings.sandbox_timeout_s,
        )
        weakest = settings.sandbox_allow_weak_containment
        allow = Level(weakest) if weakest else Level.FULL
        return cls(limits, workers=settings.sandbox_workers, allow=allow)

    @property
    def level(self) -> Level:
        """The containment level sandbox processes reach here (probed once, then kept)."""
        with self._lock:
            if self._probed is None:
                try:
                    self._probed = probe(self.limits)
                except (PydanticFailed, OSError) as error:
                    self._probed = (Level.NONE, f"the probe failed: {error}")
                level, detail = self._probed
                if level.at_least(self.allow):
                    log.info("sandbox containment: %s (%s)", level.value, detail)
                else:
                    log.warning(
                        "sandbox containment: %s (%s), below %s: Pydantic sources are refused",
                        level.value, detail, self.allow.value,
                    )  # fmt: skip
            return self._probed[0]

    def _check_level(self) -> Level:
        level = self.level
        if not level.at_least(self.allow):
            assert self._probed is not None
            raise SandboxUnconfined(
                f"Pydantic sources are refused: the sandbox reaches containment level "
                f"{level.value!r} on this server, below {self.allow.value!r} "
                f"({self._probed[1]}). The operator can accept it with "
                f"MASKSCOPE_SANDBOX_ALLOW_WEAK_CONTAINMENT={level.value}."
            )
        return level

    @property
    def runs(self) -> int:
        """Sandbox processes run for sources so far, each counted once over (the probe not
        counted; nor a run stopped before its process started)."""
        with self._lock:
            return self._runs

    @property
    def running(self) -> tuple[int, ...]:
        """The pids of the sandbox processes running now."""
        with self._lock:
            pids = [cancel.pid for cancel in self._running]
        return tuple(pid for pid in pids if pid is not None)

    @contextmanager
    def _counted(self, cancel: Cancel) -> Iterator[None]:
        with self._lock:
            self._running.append(cancel)
        try:
            yield
        finally:
            with self._lock:
                self._running.remove(cancel)
                self._runs += cancel.started

    def _run(
        self, request: dict[str, Any], cancel: Cancel | None = None
    ) -> tuple[dict[str, Any], CheckedSource]:
        """The child's answer for ``request``, run on the checked source (methods removed), and
        that checked source."""
        level = self._check_level()
        with _CHECKING:
            checked = check_source(request["source"])
        cancel = cancel or Cancel()
        with self._slots, self._counted(cancel):
            answer = run_child(
                {**request, "source": checked.source}, self.limits, require=level, cancel=cancel
            )
        if not answer["ok"]:
            error = answer.get("error")
            if not isinstance(error, dict):
                raise malformed()
            line = error.get("line")
            raise PydanticFailed(
                str(error.get("message")), line=line if isinstance(line, int) else None
            )
        return answer, checked

    def schema(self, source: str, root_model: str | None = None) -> PydanticSchema:
        """The JSON Schema pydantic derives for the root model (the last one, or ``root_model``).

        Raises:
            SandboxUnconfined: the containment is below what the operator allows.
            SourceRefused: the static check refused the source.
            PydanticFailed: pydantic raised, or the run hit a limit.
        """
        cached = self._cached(source, root_model)
        if cached is not None:
            return cached
        answer, checked = self._run(
            {"action": "schema", "source": source, "root_model": root_model}
        )
        try:
            result = PydanticSchema(
                dict(answer["schema"]),
                tuple(map(str, answer["models"])),
                str(answer["root"]),
                checked.stripped,
                checked.source,
            )
        except (KeyError, TypeError, ValueError):
            raise malformed() from None
        self._keep(source, root_model, result)
        return result

    def schemas(
        self, source: str, names: Sequence[str], *, cancel: Cancel | None = None
    ) -> dict[str, PydanticSchema | PydanticFailed]:
        """The JSON Schema of each named model, all derived in one sandbox process (the cached
        ones not derived again): a model's failure is its own entry, the others still derived.

        Args:
            source: the Pydantic source.
            names: the models wanted (each is the root of its schema).
            cancel: stops the run from another thread (its process killed).

        Returns:
            Each name's schema, or the error deriving it (``no model named ...`` for a name the
            source does not define), in the order of ``names``.

        Raises:
            SandboxUnconfined, SourceRefused: as :meth:`schema`.
            PydanticFailed: the source itself failed (it raised, or the run hit a limit).
            RequestEnded: ``cancel`` was set before the run answered.
        """
        found: dict[str, PydanticSchema | PydanticFailed] = {}
        for name in names:
            cached = self._cached(source, name)
            if cached is not None:
                found[name] = cached
        wanted = list(dict.fromkeys(n for n in names if n not in found))
        if wanted:
            request = {"action": "schemas", "source": source, "root_models": wanted}
            answer, checked = self._run(request, cancel)
            for name, derived in zip(wanted, _each(answer, len(wanted)), strict=True):
                outcome = _outcome(derived, name, answer["models"], checked)
                if isinstance(outcome, PydanticSchema):
                    self._keep(source, name, outcome)
                found[name] = outcome
        return {name: found[name] for name in names}

    def _cached(self, source: str, root_model: str | None) -> PydanticSchema | None:
        key = (source, root_model)  # cached only at a level allowed, which never changes
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        return None

    def _keep(self, source: str, root_model: str | None, result: PydanticSchema) -> None:
        with self._lock:
            self._cache[(source, root_model)] = result
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)

    def validate_many(
        self, source: str, root_model: str | None, texts: Sequence[str]
    ) -> list[Validation]:
        """Validate each text with the Pydantic model itself (``model_validate_json``), all in
        one sandbox process.

        Raises:
            SandboxUnconfined, SourceRefused, PydanticFailed: as :meth:`schema`.
        """
        if not texts:
            return []
        answer, _ = self._run(
            {"action": "validate", "source": source, "root_model": root_model, "texts": list(texts)}
        )
        try:
            verdicts = [
                tuple(ValidationError(str(e["path"]), str(e["message"])) for e in errors)
                for errors in answer["errors"]
            ]
        except (KeyError, TypeError):
            raise malformed() from None
        if len(verdicts) != len(texts):
            raise malformed()
        return [Validation(not errors, errors) for errors in verdicts]

    def validate(self, source: str, root_model: str | None, text: str) -> Validation:
        """Validate one text: :meth:`validate_many` with one text."""
        return self.validate_many(source, root_model, [text])[0]


def _each(answer: dict[str, Any], count: int) -> list[dict[str, Any]]:
    """The per-model entries of a ``schemas`` answer, checked for shape (a process that ran
    hostile code may forge anything)."""
    each, models = answer.get("schemas"), answer.get("models")
    if not isinstance(each, list) or len(each) != count or not isinstance(models, list):
        raise malformed()
    if not all(isinstance(e, dict) for e in each) or not all(isinstance(m, str) for m in models):
        raise malformed()
    return each


def _outcome(
    derived: dict[str, Any], name: str, models: list[str], checked: CheckedSource
) -> PydanticSchema | PydanticFailed:
    """One entry of a ``schemas`` answer: the model's schema, or the error deriving it."""
    schema, error = derived.get("schema"), derived.get("error")
    if isinstance(schema, dict):
        return PydanticSchema(schema, tuple(models), name, checked.stripped, checked.source)
    if not isinstance(error, dict):
        raise malformed()
    line = error.get("line")
    return PydanticFailed(str(error.get("message")), line=line if isinstance(line, int) else None)
