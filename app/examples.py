"""The example schemas in ``schemas/``: one entry of ``examples.json`` per example.

A schema example is ``<id>.json`` (its JSON Schema) and ``<id>.py`` (its Pydantic models); a
tools example (``"kind": "tools"``, listed in ``tool_examples.json``) is ``<id>.tools.json``, a
``tools`` source.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

__all__ = ["EXAMPLES_DIR", "Example", "load_all_examples", "load_examples", "load_tool_examples"]

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
        directory: where its files are.
        kind: ``json_schema`` (a schema example) or ``tools``.
    """

    id: str
    title: str
    description: str
    system: str
    prompt: str
    max_tokens: int
    schema_in_prompt: bool
    directory: Path
    kind: str = "json_schema"

    def source(self, suffix: str | None = None) -> str:
        """The example's source with the given suffix (by default its first kind's: ``.json``,
        its JSON Schema, or ``.tools.json``)."""
        if suffix is None:
            suffix = ".tools.json" if self.kind == "tools" else ".json"
        return (self.directory / f"{self.id}{suffix}").read_text(encoding="utf-8")

    def sources(self) -> dict[str, str]:
        """The example's sources by grammar kind."""
        if self.kind == "tools":
            return {"tools": self.source()}
        return {"json_schema": self.source(".json"), "pydantic": self.source(".py")}


def load_examples(directory: Path = EXAMPLES_DIR) -> list[Example]:
    """Read ``examples.json`` in ``directory``."""
    entries = json.loads((directory / "examples.json").read_text(encoding="utf-8"))
    return [Example(directory=directory, **entry) for entry in entries]


def load_tool_examples(directory: Path = EXAMPLES_DIR) -> list[Example]:
    """Read ``tool_examples.json`` in ``directory``: the examples of the ``tools`` kind."""
    entries = json.loads((directory / "tool_examples.json").read_text(encoding="utf-8"))
    return [Example(directory=directory, kind="tools", **entry) for entry in entries]


def load_all_examples(directory: Path = EXAMPLES_DIR) -> list[Example]:
    """Every example the page offers: the schema examples, then the tools examples."""
    return [*load_examples(directory), *load_tool_examples(directory)]
