"""A suite upload read within its caps: a zip (a folder zipped), a JSONL suite, or a folder's
files, into :mod:`app.suite`'s sources; and the id of what is checked.

What a suite is (its files' kinds, the tests beside them, a JSONL's lines) is
:func:`app.suite.discovery.discover`'s answer: the upload's files are written, once checked, in
a temporary directory of this suite's own, read back as sources (their text in memory) and the
directory removed before anything is checked. Nothing else of the upload touches the disk.
"""

from __future__ import annotations

import io
import re
import stat
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from app.doctor import DEFAULT_BUDGET_MS
from app.engine.stack_pins import MASKSCOPE, configured
from app.exceptions import InvalidInput, MaskscopeError, TooLarge
from app.settings import Settings
from app.store.base import canonical_id, canonical_json
from app.suite import CheckOptions
from app.suite.checker import ENGINES
from app.suite.discovery import Source, discover, display_name
from app.suite.kinds import SUFFIXES, TESTS_SUFFIX

__all__ = ["Upload", "check_choices", "check_stacks", "options_for", "read_upload", "suite_id"]

#: The file's field of the upload form, named in the errors' JSON pointer.
_POINTER = "/file"
_CHUNK = 64 * 1024


@dataclass(frozen=True)
class Upload:
    """One uploaded file.

    Attributes:
        name: its name: a ``.zip``, a ``.jsonl``, or a suite file's path inside its folder
            (``schemas/person.json``, from a folder picked in the page).
        data: its bytes.
    """

    name: str
    data: bytes


# --- reading an upload ----------------------------------------------------------------------


def _relative(name: str, what: str) -> PurePosixPath:
    """``name`` as a path inside the suite; absolute paths and ``..`` refused (zip slip)."""
    posix = name.replace("\\", "/")
    if posix.startswith("/") or re.match(r"^[A-Za-z]:", posix):
        raise InvalidInput(
            f"{what} {name!r} is an absolute path: a suite's files stay inside it", pointer=_POINTER
        )
    parts = [p for p in posix.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise InvalidInput(
            f"{what} {name!r} climbs out of the suite (..): a suite's files stay inside it",
            pointer=_POINTER,
        )
    if not parts or "\x00" in posix:
        raise InvalidInput(f"{what} {name!r} names no file", pointer=_POINTER)
    return PurePosixPath(*parts)


def _over(settings: Settings, size: int, how: str) -> TooLarge:
    return TooLarge(
        f"the suite {how} {size:,} bytes: over the {settings.suite_max_unpacked_bytes:,} "
        "bytes a suite may hold unpacked (MASKSCOPE_SUITE_MAX_UNPACKED_BYTES)",
        pointer=_POINTER,
    )


def _too_many_files(settings: Settings, count: int) -> TooLarge:
    return TooLarge(
        f"the suite holds {count:,} files: over the {settings.suite_max_files:,} a suite may "
        "hold (MASKSCOPE_SUITE_MAX_FILES)",
        pointer=_POINTER,
    )


def _entry(archive: zipfile.ZipFile, info: zipfile.ZipInfo, left: int, settings: Settings) -> bytes:
    """An entry's bytes, counted as they are read: never more than ``left`` (whatever the
    entry's header declares)."""
    chunks, size = [], 0
    with archive.open(info) as member:
        while chunk := member.read(_CHUNK):
            size += len(chunk)
            if size > left:
                used = settings.suite_max_unpacked_bytes - left + size
                raise _over(settings, used, f"unpacks (counted at {info.filename!r}) to over")
            chunks.append(chunk)
    return b"".join(chunks)


def _unzip(data: bytes, settings: Settings) -> dict[PurePosixPath, bytes]:
    """A zip's files by their path in the suite, within the caps: its entries' names, count
    and declared sizes checked before a byte is unpacked, then the bytes counted."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError) as error:
        raise InvalidInput(f"the upload is not a zip archive: {error}", pointer=_POINTER) from None
    with archive:
        infos = [i for i in archive.infolist() if not i.is_dir()]
        if len(infos) > settings.suite_max_files:
            raise _too_many_files(settings, len(infos))
        for info in infos:
            _relative(info.filename, "the zip's entry")
            if stat.S_ISLNK(info.external_attr >> 16):
                raise InvalidInput(
                    f"the zip's entry {info.filename!r} is a symbolic link: a "
                    "suite holds files only",
                    pointer=_POINTER,
                )
            if info.flag_bits & 0x1:
                raise InvalidInput(
                    f"the zip's entry {info.filename!r} is encrypted", pointer=_POINTER
                )
        declared = sum(i.file_size for i in infos)
        if declared > settings.suite_max_unpacked_bytes:
            raise _over(settings, declared, "declares")
        files: dict[PurePosixPath, bytes] = {}
        left = settings.suite_max_unpacked_bytes
        for info in infos:
            try:
                content = _entry(archive, info, left, settings)
            except (zipfile.BadZipFile, OSError, EOFError) as error:  # a corrupt or lying entry
                raise InvalidInput(
                    f"the zip's entry {info.filename!r} cannot be read: {error}", pointer=_POINTER
                ) from None
            left -= len(content)
            files[_relative(info.filename, "the zip's entry")] = content
    return files


def _files(
    uploads: Sequence[Upload], settings: Settings
) -> tuple[dict[PurePosixPath, bytes], PurePosixPath | None]:
    """The suite's files, and the JSONL to read (None: every file of the tree)."""
    if not uploads:
        raise InvalidInput(
            "the upload holds no file: send a .zip, a .jsonl or a folder's files", pointer=_POINTER
        )
    if len(uploads) == 1 and uploads[0].name.lower().endswith(".zip"):
        return _unzip(uploads[0].data, settings), None
    if len(uploads) > settings.suite_max_files:
        raise _too_many_files(settings, len(uploads))
    total = sum(len(u.data) for u in uploads)
    if total > settings.suite_max_unpacked_bytes:
        raise _over(settings, total, "holds")
    files = {_relative(u.name, "the file"): u.data for u in uploads}
    if len(uploads) == 1 and uploads[0].name.lower().endswith(".jsonl"):
        return files, next(iter(files))
    return files, None


def _renamed(source: Source, prefix: str) -> Source:
    """``source`` named inside the suite (without the temporary directory's path)."""

    def inside(name: str | None) -> str | None:
        return name.removeprefix(prefix) if name is not None else None

    return Source(
        str(inside(source.name)),
        str(inside(source.path)),
        source.kind,
        source.text,
        source.tests,
        inside(source.tests_path),
        source.line,
        source.error,
    )


def read_upload(uploads: Sequence[Upload], settings: Settings) -> list[Source]:
    """The sources of an upload: a zip (a folder zipped), a JSONL suite, or a folder's files.

    Raises:
        InvalidInput: 422: a path outside the suite (absolute, ``..``, a symbolic link), a zip
            that does not read, a bad JSONL line, no source at all.
        TooLarge: 413: more files, unpacked bytes or sources than the settings allow, or a
            source larger than ``source_max_bytes``.
    """
    files, jsonl = _files(uploads, settings)
    with tempfile.TemporaryDirectory(prefix="maskscope-suite-") as folder:
        root = Path(folder)
        for path, data in files.items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_bytes(data)
        prefix = display_name(root) + "/"
        try:
            found = discover([str(root / jsonl) if jsonl else str(root)])
        except MaskscopeError as error:
            raise InvalidInput(
                error.message.replace(prefix, ""),
                line=error.line,
                column=error.column,
                pointer=_POINTER,
            ) from None
        sources = [_renamed(s, prefix) for s in found]
    if not sources:
        known = ", ".join(SUFFIXES)
        raise InvalidInput(
            f"the upload holds no source: a suite's files end in {known} (with "
            f"their tests beside them, NAME{TESTS_SUFFIX})",
            pointer=_POINTER,
        )
    if len(sources) > settings.suite_max_sources:
        raise TooLarge(
            f"the suite holds {len(sources):,} sources: over the "
            f"{settings.suite_max_sources:,} a suite may hold "
            "(MASKSCOPE_SUITE_MAX_SOURCES)",
            pointer=_POINTER,
        )
    for source in sources:
        size = len((source.text or "").encode("utf-8"))
        if size > settings.source_max_bytes:
            raise TooLarge(
                f"{source.name} is {size:,} bytes: over the "
                f"{settings.source_max_bytes:,} a source may be "
                "(MASKSCOPE_SOURCE_MAX_BYTES)",
                pointer=_POINTER,
            )
    return sources


def check_stacks(stacks: Sequence[str], settings: Settings) -> None:
    """Refuse a stack this server does not know (422): ``maskscope`` or one
    ``MASKSCOPE_STACKS`` lists. One that is not installed is checked, and each of its cases is
    a ``compile_error`` saying why (as ``GET /api/stacks`` says it)."""
    known = [MASKSCOPE, *configured(settings)]
    for index, name in enumerate(stacks):
        if name not in known:
            raise InvalidInput(
                f"stack {name!r} is not one of {', '.join(known)}", pointer=f"/stack/{index}"
            )


def check_choices(engines: Sequence[str], preset: str, presets: Sequence[str]) -> None:
    """Refuse an engine or a preset this server does not check with (422)."""
    for index, engine in enumerate(engines):
        if engine not in ENGINES:
            raise InvalidInput(
                f"engine {engine!r} is not one of {', '.join(ENGINES)}", pointer=f"/engine/{index}"
            )
    if preset not in presets:
        raise InvalidInput(
            f"preset {preset!r} is not one of {', '.join(presets)}", pointer="/preset"
        )


def suite_id(
    sources: Sequence[Source],
    stacks: Sequence[str],
    engines: Sequence[str],
    options: CheckOptions,
    model: dict[str, Any],
) -> str:
    """The suite's id: a hash of what is checked (every source, its tests, the stacks, engines,
    options and the model and library versions), so the same suite on the same server gets the
    same link, and a link never names a report of other inputs."""
    content = {
        "sources": [[s.name, s.kind, s.text, s.tests] for s in sources],
        "stacks": list(stacks),
        "engines": list(engines),
        "options": options.key(),
        "model": model,
    }
    return canonical_id(canonical_json(content))


def options_for(preset: str) -> CheckOptions:
    """The options a suite uploaded with ``preset`` is checked with (the CLI's defaults)."""
    return CheckOptions(preset=preset, model="local", budget_ms=DEFAULT_BUDGET_MS)
