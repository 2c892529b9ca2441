"""The sandbox's front door: containment level, check, run (bounded concurrency), cache."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.exceptions import PydanticFailed, SandboxUnconfined
from app.sandbox.check import CheckedSource, check_source
from app.sandbox.contain import Level
from app.sandbox.process import Limits, malformed, probe, run_child
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

    def _run(self, request: dict[str, Any]) -> tuple[dict[str, Any], CheckedSource]:
        """The child's answer for ``request``, run on the checked source (methods removed), and
        that checked source."""
        level = self._check_level()
        with _CHECKING:
            checked = check_source(request["source"])
        with self._slots:
            answer = run_child({**request, "source": checked.source}, self.limits, require=level)
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
        key = (source, root_model)  # cached only at a level allowed, which never changes
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
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
        with self._lock:
            self._cache[key] = result
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return result

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
