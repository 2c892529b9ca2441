"""Parse a finished server-sent-events body."""

from __future__ import annotations

from collections.abc import Iterable, Iterator


def parse_events(body: str) -> list[dict[str, str]]:
    """Events as dicts with ``event``, ``id`` and ``data`` (multi-line data joined by newlines)."""
    events = []
    for block in body.replace("\r\n", "\n").split("\n\n"):
        fields: dict[str, list[str]] = {}
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            fields.setdefault(name, []).append(value[1:] if value.startswith(" ") else value)
        if fields:
            event = {k: "\n".join(v) for k, v in fields.items()}
            event.setdefault("event", "message")
            events.append(event)
    return events


def iter_events(lines: Iterable[str]) -> Iterator[dict[str, str]]:
    """Events as they arrive, from the lines of a streamed body."""
    block: list[str] = []
    for line in lines:
        if line:
            block.append(line)
        elif block:
            yield from parse_events("\n".join(block))
            block = []
