"""The test tiers: what each test needs, as marks, and the guard that keeps the fast tier fast.

A test is marked ``model`` (the real model, or an app on it), ``browser`` (Chromium), ``server``
(a real server process: vLLM, PostgreSQL, nginx, Caddy, a live uvicorn) or ``remote`` (a remote
engine on vLLM) from the fixtures it requests (:data:`FIXTURE_MARKS`, applied at collection by
``tests/conftest.py``), or by a ``pytestmark`` in a module that starts such things itself.
``make test-fast`` runs every test with none of the four marks (docs/testing.md).

The real model cannot load unseen in a run that deselects ``model``: the ``engine`` fixture
refuses to start, and :class:`ModelGuard` makes any other load of the model's weights in
the test process fail the test that did it.
"""

from __future__ import annotations

from typing import Any

import pytest
from _pytest.mark.expression import Expression  # pytest's own `-m` evaluator

__all__ = [
    "FIXTURE_MARKS",
    "ModelGuard",
    "ModelInFastTier",
    "excludes",
    "mark_by_fixtures",
    "refuse_outside_tier",
]

#: A fixture -> the marks every test that requests it (even through another fixture) gets.
FIXTURE_MARKS: dict[str, tuple[str, ...]] = {
    "engine": ("model",),
    "browser": ("browser",),
    "postgres": ("server",),
    "live_server": ("server",),
    "vllm_server": ("remote", "server"),
    "vllm_capped_server": ("remote", "server"),
}

_FIX_HINT = (
    "request the `engine` fixture, or mark the test (or its module's pytestmark) "
    "`pytest.mark.model`"
)


def mark_by_fixtures(item: pytest.Item) -> None:
    """Add to ``item`` the marks of the fixtures it requests (its whole fixture closure)."""
    names = set(getattr(item, "fixturenames", ()))
    for fixture, marks in FIXTURE_MARKS.items():
        if fixture in names:
            for mark in marks:
                if item.get_closest_marker(mark) is None:
                    item.add_marker(mark)


class _Only:
    """An ``-m`` matcher for a test that carries exactly one mark."""

    def __init__(self, mark: str) -> None:
        self.mark = mark

    def __call__(self, name: str, /, **kwargs: str | int | bool | None) -> bool:
        return name == self.mark and not kwargs


def excludes(config: pytest.Config, mark: str) -> bool:
    """Whether this run's ``-m`` deselects a test marked ``mark`` alone (``-m "not model"``)."""
    expression = config.getoption("markexpr", "") or ""
    if not expression:
        return False
    return not Expression.compile(expression).evaluate(_Only(mark))


def refuse_outside_tier(config: pytest.Config, mark: str, what: str) -> None:
    """Fail the test at once when this run deselects ``mark`` but a fixture of it is asked for
    (a test that reaches ``what`` without the mark)."""
    if excludes(config, mark):
        pytest.fail(
            f"this run deselects `{mark}` (-m {config.getoption('markexpr')!r}) but a test "
            f"asked for {what}: mark it `{mark}`",
            pytrace=False,
        )


class ModelInFastTier(Exception):
    """The real model's weights were asked for in a run that deselects ``model``."""


class ModelGuard:
    """In a run that deselects ``model``: loading a causal LM's weights (transformers'
    ``AutoModelForCausalLM.from_pretrained``, which the app's model loading calls) raises
    :class:`ModelInFastTier`, and :meth:`check` fails the test that did it even where the app
    swallowed the error (an app's start-up keeps a load error for ``/readyz``)."""

    def __init__(self) -> None:
        self.attempts: list[str] = []
        self._reported = 0
        self._patch = pytest.MonkeyPatch()

    def install(self) -> None:
        """Refuse every load from now on."""
        from transformers import AutoModelForCausalLM

        def refuse(source: Any, *args: Any, **kwargs: Any) -> Any:
            self.attempts.append(str(source))
            raise ModelInFastTier(
                f"this run deselects `model`, but {source!r} was loaded: {_FIX_HINT}"
            )

        self._patch.setattr(AutoModelForCausalLM, "from_pretrained", refuse)

    def uninstall(self) -> None:
        """Undo :meth:`install`."""
        self._patch.undo()

    def check(self, report: pytest.TestReport) -> None:
        """Turn ``report`` into a failure when its phase loaded the model."""
        if len(self.attempts) > self._reported:
            loaded = ", ".join(self.attempts[self._reported :])
            self._reported = len(self.attempts)
            report.outcome = "failed"
            report.longrepr = (
                f"{report.nodeid} loaded the real model ({loaded}) in a run that deselects "
                f"`model`: {_FIX_HINT}"
            )
