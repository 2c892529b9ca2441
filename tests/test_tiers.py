"""The tiers' guard (tests/tiers.py): a run that deselects ``model`` cannot load the real model
unseen, and the marks follow the fixtures a test asks for."""

from __future__ import annotations

from typing import Any

import pytest
from transformers import AutoModelForCausalLM

from tests.tiers import ModelGuard, ModelInFastTier, excludes


class _Config:
    def __init__(self, markexpr: str) -> None:
        self.markexpr = markexpr

    def getoption(self, name: str, default: Any = None) -> Any:
        assert name == "markexpr"
        return self.markexpr


@pytest.mark.parametrize(
    ("markexpr", "excluded"),
    [
        ("", False),
        ("not model", True),
        ("not model and not browser and not server and not remote", True),
        ("not browser", False),
        ("model", False),
        ("model or not model", False),
    ],
)
def test_a_run_excludes_model_only_when_its_m_deselects_a_model_test(
    markexpr: str, excluded: bool
) -> None:
    assert excludes(_Config(markexpr), "model") is excluded  # type: ignore[arg-type]


def test_the_guard_refuses_the_weights_and_fails_the_test_that_asked() -> None:
    original = AutoModelForCausalLM.from_pretrained
    guard = ModelGuard()
    guard.install()
    try:
        with pytest.raises(ModelInFastTier, match="mark the test"):
            AutoModelForCausalLM.from_pretrained("some/model")
    finally:
        guard.uninstall()
    assert AutoModelForCausalLM.from_pretrained == original
    # Even where the app swallowed the error (a start-up keeps it for /readyz), the report fails.
    report = pytest.TestReport("t::x", ("t", 1, "x"), {}, "passed", None, "call")
    guard.check(report)
    assert report.outcome == "failed" and "some/model" in str(report.longrepr)
    again = pytest.TestReport("t::y", ("t", 1, "y"), {}, "passed", None, "call")
    guard.check(again)  # reported once: the next test is not blamed for it
    assert again.outcome == "passed"


def test_the_fixtures_that_need_a_tier_mark_their_tests(request: pytest.FixtureRequest) -> None:
    # This test asks for no heavy fixture: it is in the fast tier, with no tier mark.
    assert not {"model", "browser", "server", "remote"} & {
        mark.name for mark in request.node.iter_markers()
    }
