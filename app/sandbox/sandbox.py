"""The sandbox's front door: check, run (bounded concurrency), cache."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.engine.records import Validation, ValidationError
from app.exceptions import PydanticFailed
from app.sandbox.check import check_source
from app.sandbox.process import Limits, run_child

__all__ = ["PydanticSchema", "Sandbox"]


@dataclass(frozen=True)
class PydanticSchema:
    """What pydantic derived from a source: the root model's JSON Schema and the models found."""

    schema: dict[str, Any]
    models: tuple[str, ...]
    root: str


class Sandbox:
    """Runs Pydantic sources in limited processes, a few at a time.

    Args:
        limits: CPU, memory, output size and wall-clock limits of one run.
        workers: runs at once; more wait their turn.
        cache_size: derived schemas kept (a source's schema never changes).
    """

    def __init__(self, limits: Limits | None = None, *, workers: int = 4, cache_size: int = 256):
        self.limits = limits or Limits()
        self._slots = threading.BoundedSemaphore(workers)
        self._cache: OrderedDict[tuple[str, str | None], PydanticSchema] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    def _run(self, request: dict[str, Any]) -> dict[str, Any]:
        check_source(request["source"])
        with self._slots:
            answer = run_child(request, self.limits)
        if not answer.get("ok"):
            error = answer.get("error") or {}
            raise PydanticFailed(str(error.get("message")), line=error.get("line"))
        return answer

    def schema(self, source: str, root_model: str | None = None) -> PydanticSchema:
        """The JSON Schema pydantic derives for the root model (the last one, or ``root_model``).

        Raises:
            SourceRefused: the static check refused the source.
            PydanticFailed: pydantic raised, or the run hit a limit.
        """
        key = (source, root_model)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        answer = self._run({"action": "schema", "source": source, "root_model": root_model})
        result = PydanticSchema(answer["schema"], tuple(answer["models"]), answer["root"])
        with self._lock:
            self._cache[key] = result
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return result

    def validate(self, source: str, root_model: str | None, text: str) -> Validation:
        """Validate ``text`` with the Pydantic model itself (``model_validate_json``)."""
        answer = self._run(
            {"action": "validate", "source": source, "root_model": root_model, "text": text}
        )
        errors = tuple(ValidationError(e["path"], e["message"]) for e in answer["errors"])
        return Validation(not errors, errors)

    def validate_many(
        self, source: str, root_model: str | None, texts: Sequence[str]
    ) -> list[Validation]:
        """Validate each text with the Pydantic model, all in one sandbox process."""
        answer = self._run(
            {"action": "validate_many", "source": source, "root_model": root_model,
             "texts": list(texts)}
        )  # fmt: skip
        return [
            Validation(not errors, tuple(ValidationError(e["path"], e["message"]) for e in errors))
            for errors in answer["results"]
        ]
