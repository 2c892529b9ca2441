"""Texts shown to a client without this server's paths: its home, cache and model directories
are written by their names (an error of a library quotes the files it read)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

__all__ = ["hide_paths"]


def hide_paths(text: str, named: Iterable[tuple[Path, str]] = ()) -> str:
    """``text`` with each path of ``named`` (and the home directory, as ``~``) replaced by its
    name, the longest first, whether written as given or resolved.

    Args:
        text: a message that may quote server paths.
        named: ``(path, name)`` pairs, e.g. ``(settings.cache_dir, "<cache_dir>")``; a relative
            path or the root is left alone.
    """
    shown: dict[str, str] = {}
    for path, name in ((Path.home(), "~"), *named):
        if path.is_absolute() and len(path.parts) > 1:
            shown[str(path)] = shown[os.path.realpath(path)] = name
    for written in sorted(shown, key=len, reverse=True):
        text = text.replace(written, shown[written])
    return text
