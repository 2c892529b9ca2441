"""A suite's sources: the files of a directory (recursively), of a glob, or the lines of a JSONL,
each with its kind (:mod:`app.suite.kinds`) and the schema unit tests beside it."""

from __future__ import annotations

import glob
import json
import os
from dataclasses import dataclass
from pathlib import Path

from app.exceptions import InvalidInput
from app.suite.kinds import TESTS_SUFFIX, kind_of

__all__ = ["Source", "discover", "display_name"]

_SKIPPED_DIRS = ("__pycache__", "node_modules")


@dataclass(frozen=True)
class Source:
    """One source of a suite.

    Attributes:
        name: how reports name it: the file's path relative to the working directory (POSIX
            separators), ``FILE.jsonl#NAME`` for a JSONL line.
        path: the file findings point at (the JSONL itself for one of its lines).
        kind: the source kind (``json_schema``, ``tools``, ...).
        text: the source text (None when the file is not UTF-8: see ``error``).
        tests: the schema unit tests, as JSON Lines text (None: none beside it).
        tests_path: the tests file (None for a JSONL line's inline tests).
        line: the JSONL line the source is (None for a file of its own).
        error: why the file could not be read.
    """

    name: str
    path: str
    kind: str
    text: str | None
    tests: str | None = None
    tests_path: str | None = None
    line: int | None = None
    error: str | None = None


def display_name(path: Path) -> str:
    """``path`` relative to the working directory when below it, with POSIX separators."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def _read(path: Path) -> tuple[str | None, str | None]:
    try:
        return path.read_text(encoding="utf-8"), None
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 text: byte {exc.start}"


def _file_source(path: Path, kind: str, suffix: str) -> Source:
    text, error = _read(path)
    tests_file = path.with_name(path.name[: -len(suffix)] + TESTS_SUFFIX)
    tests = tests_file.read_text(encoding="utf-8") if tests_file.is_file() else None
    return Source(
        display_name(path), display_name(path), kind, text, tests,
        display_name(tests_file) if tests is not None else None, error=error,
    )  # fmt: skip


def _in_tree(root: Path, skip: set[Path]) -> list[Path]:
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [
            d for d in dirs
            if not d.startswith(".") and d not in _SKIPPED_DIRS
            and (Path(folder) / d).resolve() not in skip
        ]  # fmt: skip
        found += [Path(folder) / f for f in files if not f.startswith((".", "__"))]
    return found


def _jsonl_entry(path: Path, number: int, line: str) -> Source:
    where = f"{display_name(path)}:{number}"
    try:
        entry = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{where}: not JSON: {exc.msg}", line=number, column=exc.colno) from None
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        raise InvalidInput(f'{where}: a suite line is {{"name", "source", "kind"?, "tests"?}}',
                           line=number)  # fmt: skip
    known = kind_of(entry["name"])
    kind = entry.get("kind") or (known[0] if known else None)
    source = entry.get("source")
    if not isinstance(kind, str) or source is None:
        raise InvalidInput(f"{where}: needs a source and a kind (or a name with a known suffix)",
                           line=number)  # fmt: skip
    text = source if isinstance(source, str) else json.dumps(source, indent=2)
    tests = entry.get("tests")
    lines = None if tests is None else "\n".join(json.dumps(t) for t in tests)
    name = f"{display_name(path)}#{entry['name']}"
    return Source(name, display_name(path), kind, text, lines, line=number)


def _jsonl(path: Path) -> list[Source]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [_jsonl_entry(path, n, line) for n, line in enumerate(lines, start=1) if line.strip()]


def _of_file(path: Path, *, named: bool) -> list[Source]:
    if path.name.endswith(TESTS_SUFFIX):
        return []
    if path.suffix == ".jsonl":
        return _jsonl(path) if named else []
    known = kind_of(path.name)
    if known is None:
        if named:
            raise InvalidInput(f"{path}: no source kind has this file's suffix")
        return []
    return [_file_source(path, *known)]


def discover(paths: list[str], *, skip: tuple[Path, ...] = ()) -> list[Source]:
    """The sources ``paths`` name, sorted by name, each once.

    Args:
        paths: directories (walked, hidden folders skipped), glob patterns, files with a known
            suffix, and JSONL suites (a ``{"name", "source", "kind"?, "tests"?}`` object a line).
        skip: folders never walked (the cache directory).

    Raises:
        InvalidInput: a path that names nothing, a file of no known kind, a bad JSONL line.
    """
    skipped = {s.resolve() for s in skip}
    found: dict[str, Source] = {}
    for given in paths:
        if any(c in given for c in "*?["):
            matches = [Path(p) for p in sorted(glob.glob(given, recursive=True))]
            if not matches:
                raise InvalidInput(f"{given}: the pattern matches no file")
            files = [(p, False) for p in matches if p.is_file()]
        elif Path(given).is_dir():
            files = [(p, False) for p in _in_tree(Path(given), skipped)]
        elif Path(given).is_file():
            files = [(Path(given), True)]
        else:
            raise InvalidInput(f"{given}: no such file or directory")
        for path, named in files:
            for source in _of_file(path, named=named):
                found.setdefault(source.name, source)
    return sorted(found.values(), key=lambda s: s.name)
