"""The example schemas in ``schemas/``: one entry of ``examples.json`` per example."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

__all__ = ["EXAMPLES_DIR", "Example", "load_examples"]

EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "schemas"


@dataclass(frozen=True)
class Example:
    """An example schema with the prompt it was written for.

    Attributes:
        id: the file stem: ``schemas/<id>.json`` holds the JSON Schema.
        title: a short name for the picker.
        description: what the example shows.
        system: the system message.
        prompt: the user message.
        max_tokens: a step limit the default model finishes within.
        schema_in_prompt: whether the schema is appended to the system message.
    """

    id: str
    title: str
    description: str
    system: str
    prompt: str
    max_tokens: int
    schema_in_prompt: bool
    directory: Path

    def source(self, suffix: str = ".json") -> str:
        """The example's source of the given kind (``.json`` is its JSON Schema)."""
        return (self.directory / f"{self.id}{suffix}").read_text(encoding="utf-8")


def load_examples(directory: Path = EXAMPLES_DIR) -> list[Example]:
    """Read ``examples.json`` in ``directory``."""
    entries = json.loads((directory / "examples.json").read_text(encoding="utf-8"))
    return [Example(directory=directory, **entry) for entry in entries]
