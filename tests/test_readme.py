"""The README stays true: every setting, route and command it should name, it names."""

from __future__ import annotations

from pathlib import Path

from app.main import create_app
from app.settings import Settings

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def test_every_setting_is_documented() -> None:
    for name in Settings.model_fields:
        assert f"MASKSCOPE_{name.upper()}" in README, name


def test_every_api_route_is_documented() -> None:
    paths = set(create_app(Settings()).openapi()["paths"])
    documented = README.replace("{session_id}", "{id}").replace("{snapshot_id}", "{id}")
    for path in paths:
        normal = path.replace("{session_id}", "{id}").replace("{snapshot_id}", "{id}")
        normal = normal.replace("{example_id}", "{id}")
        assert normal in documented, path


def test_the_quick_start_is_the_two_commands() -> None:
    assert "make run" in README and "make test" in README
    ci = (Path(__file__).resolve().parent.parent / ".ci" / "run").read_text()
    assert "make test" in ci
