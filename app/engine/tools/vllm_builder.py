"""The vLLM tools builder: the structural tag vLLM 0.32.0 applies, computed by vLLM's own code.

vLLM pins its own xgrammar (0.2.8), so its code runs in its own virtualenv
(``Settings.vllm_python``, made by ``make vllm-install``): :mod:`app.engine.tools.vllm_runner`,
one long-lived process per value of ``VLLM_ENFORCE_STRICT_TOOL_CALLING`` (vLLM reads it when its
parser classes are created, so one process cannot serve both), started on the first call (vLLM's
imports take seconds), started again when it has died, killed when a call runs past
``Settings.vllm_timeout_s`` and on :meth:`VllmBuilder.close`. Nothing here starts before a call,
so a server without ``.venv-vllm`` starts as quickly and lists this builder as unavailable.

What xgrammar 0.2.8 (vLLM's) and 0.2.9 (Maskscope's) build differently is not written down
anywhere: every call vLLM makes into xgrammar's builtin builders is recorded by the runner, asked
again of this process's xgrammar, and the two answers compared field by field.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import selectors
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

from app.engine.tools.base import BuilderName, ToolFormat, ToolsBuild, ToolsRequest
from app.exceptions import GrammarError, GrammarTooComplex, MaskscopeError
from app.paths import pointer_from_parts
from app.settings import Settings

__all__ = ["RUNNER", "VllmBuilder", "version_differences"]

#: The script run with vLLM's Python.
RUNNER = Path(__file__).resolve().with_name("vllm_runner.py")
#: What to run when vLLM's virtualenv is missing.
INSTALL_COMMAND = "make vllm-install"
_STRICT_ENV = "VLLM_ENFORCE_STRICT_TOOL_CALLING"
_STDERR_TAIL = 2000


class _RunnerDied(Exception):
    """The runner process ended (or never answered ready) before answering."""


class _Runner:
    """One ``vllm_runner.py`` process: a JSON line in, a JSON line out, one call at a time."""

    def __init__(self, python: Path, environment: dict[str, str], timeout_s: float) -> None:
        self._stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - kept while it runs
        self._process = subprocess.Popen(
            [str(python), "-I", str(RUNNER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=environment,
            start_new_session=True,
        )
        self._buffer = b""
        hello = self._read_line(timeout_s, what="start (importing vLLM)")
        self.versions: dict[str, str] = dict(hello.get("versions", {}))

    @property
    def alive(self) -> bool:
        return self._process.poll() is None

    @property
    def pid(self) -> int:
        return self._process.pid

    def call(self, message: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Send one request and wait up to ``timeout_s`` for its answer."""
        assert self._process.stdin is not None
        try:
            self._process.stdin.write(json.dumps(message).encode() + b"\n")
            self._process.stdin.flush()
        except OSError:  # a broken pipe: it has ended
            tail = self._stderr_tail()
            self.kill()
            raise _RunnerDied(tail) from None
        return self._read_line(timeout_s, what="answer")

    def _read_line(self, timeout_s: float, *, what: str) -> dict[str, Any]:
        assert self._process.stdout is not None
        fd = self._process.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0:
                    self.kill()
                    raise GrammarTooComplex(
                        f"vLLM's tools builder did not {what} within {timeout_s:g} s "
                        "(MASKSCOPE_VLLM_TIMEOUT_S); its process was stopped"
                    )
                if selector.select(left):
                    chunk = os.read(fd, 1 << 16)
                    if not chunk:
                        tail = self._stderr_tail()
                        self.kill()
                        raise _RunnerDied(tail)
                    self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def _stderr_tail(self) -> str:
        self._stderr.seek(0, os.SEEK_END)
        size = self._stderr.tell()
        self._stderr.seek(max(0, size - _STDERR_TAIL))
        return self._stderr.read().decode("utf-8", "replace").strip()

    def kill(self) -> None:
        """End the process (its whole group: it is the leader of its own session)."""
        if self._process.poll() is None:
            try:
                os.killpg(self._process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._process.wait()
        for stream in (self._process.stdin, self._process.stdout):
            if stream is not None:
                stream.close()
        self._stderr.close()


class VllmBuilder:
    """vLLM 0.32.0's tools builder, run from vLLM's own code in its own virtualenv.

    Args:
        settings: where vLLM's Python is (``vllm_python``) and how long a call may take
            (``vllm_timeout_s``); the configured model's tokenizer is the one :meth:`formats`
            checks the parsers against. None: ``Settings()``.
    """

    name: BuilderName = "vllm"

    def __init__(self, settings: Settings | None = None) -> None:
        self._settings = settings or Settings()
        self._runners: dict[bool | None, _Runner] = {}
        self._lock = threading.Lock()
        self._formats: dict[str, list[ToolFormat]] = {}

    def __enter__(self) -> VllmBuilder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def installed(self) -> bool:
        """Whether vLLM's virtualenv is there (its Python exists)."""
        return self._settings.vllm_python.is_file()

    def formats(self, *, tokenizer: str | None = None) -> list[ToolFormat]:
        """Every ``--tool-call-parser`` vLLM registers, read from vLLM at run time.

        A parser is available when vLLM's start-up check accepts it on ``tokenizer`` (None: the
        configured model's); its ``reasoning_end`` is the end marker of vLLM's reasoning parser of
        the same name, when there is one and it accepts the tokenizer. Without vLLM's
        virtualenv, one entry named ``unavailable`` says how to install it.
        """
        if not self.installed:
            return [
                self._unavailable(
                    f"vLLM is not installed ({self._settings.vllm_python} is missing): "
                    f"run `{INSTALL_COMMAND}`"
                )
            ]
        try:
            path = tokenizer if tokenizer is not None else self._default_tokenizer()
            if path not in self._formats:
                answer, _ = self._call(None, {"op": "formats", "tokenizer": path})
                self._formats[path] = [
                    ToolFormat(builder=self.name, **entry) for entry in answer["formats"]
                ]
        except MaskscopeError as error:  # a virtualenv that does not run, a model not there
            return [self._unavailable(error.message)]
        return list(self._formats[path])

    def _unavailable(self, reason: str) -> ToolFormat:
        return ToolFormat(
            builder=self.name,
            name="unavailable",
            builds_tag=False,
            reasoning_end=None,
            available=False,
            reason=reason,
        )

    def build(self, request: ToolsRequest, tokenizer: str) -> ToolsBuild:
        """The structural tag vLLM's server applies to ``request`` on ``tokenizer``.

        Args:
            request: the ``tools`` source; ``format`` is a vLLM ``--tool-call-parser``.
            tokenizer: a directory or hub id that vLLM's tokenizer loader opens.

        Raises:
            GrammarError: vLLM refuses the request, or the parser the tokenizer (its message,
                with a pointer into the source where vLLM names the field), or vLLM is not
                installed.
            GrammarTooComplex: vLLM's code ran past ``vllm_timeout_s``.
        """
        if not self.installed:
            raise GrammarError(
                f"the vLLM tools builder is unavailable: {self._settings.vllm_python} is "
                f"missing; run `{INSTALL_COMMAND}`",
                pointer="/builder",
            )
        message = {
            "op": "build",
            "tokenizer": tokenizer,
            "format": request.format,
            "tools": list(request.tools),
            "tool_choice": request.tool_choice,
            "reasoning": request.reasoning,
            "parallel_tool_calls": request.parallel_tool_calls,
            "strict_level": request.strict_level,
            "reasoning_parser": request.reasoning_parser,
            "response_format": request.response_format,
        }
        answer, versions = self._call(request.strict_tool_calling, message)
        notes: list[str] = []
        if answer["tag"] is not None:
            notes.append(
                f"built by vLLM {versions.get('vllm')} with xgrammar "
                f"{versions.get('xgrammar')}; Maskscope masks with xgrammar "
                f"{importlib.metadata.version('xgrammar')}"
            )
        for call in answer["xgrammar_calls"]:
            notes.extend(version_differences(call["kwargs"], call["tag"], versions["xgrammar"]))
        if answer["reasoning_end_unavailable"]:
            notes.append(f"reasoning end marker unavailable: {answer['reasoning_end_unavailable']}")
        return ToolsBuild(
            tag=answer["tag"],
            reason=answer["reason"],
            reasoning_end=answer["reasoning_end"],
            builder_versions=dict(versions),
            notes=tuple(notes),
        )

    def runner_pid(self, strict_tool_calling: bool | None = None) -> int | None:
        """The id of the live runner process for this ``strict_tool_calling``, if one runs."""
        runner = self._runners.get(strict_tool_calling)
        return runner.pid if runner is not None and runner.alive else None

    def close(self) -> None:
        """Kill every runner process this builder started."""
        with self._lock:
            for runner in self._runners.values():
                runner.kill()
            self._runners.clear()

    def _default_tokenizer(self) -> str:
        from app.engine.model import checkpoint_source

        return checkpoint_source(self._settings)

    def _call(
        self, strict: bool | None, message: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, str]]:
        """The runner's answer to ``message`` and the versions it runs."""
        with self._lock:
            try:
                runner = self._runner(strict)
                answer = runner.call(message, self._settings.vllm_timeout_s)
            except _RunnerDied:
                # A runner that died between calls (or in this one) is replaced once.
                self._runners.pop(strict, None)
                try:
                    runner = self._runner(strict)
                    answer = runner.call(message, self._settings.vllm_timeout_s)
                except _RunnerDied as died:
                    self._runners.pop(strict, None)
                    raise GrammarError(
                        f"vLLM's tools builder ended without answering: {died}"
                    ) from None
        if "error" in answer:
            error = answer["error"]
            loc = error.get("loc") or []
            raise GrammarError(error["message"], pointer=pointer_from_parts(loc) if loc else None)
        return answer, dict(runner.versions)

    def _runner(self, strict: bool | None) -> _Runner:
        runner = self._runners.get(strict)
        if runner is not None and runner.alive:
            return runner
        if runner is not None:
            runner.kill()
        environment = {k: v for k, v in os.environ.items() if k != _STRICT_ENV}
        if strict is not None:
            environment[_STRICT_ENV] = "1" if strict else "0"
        environment.setdefault("TOKENIZERS_PARALLELISM", "false")
        try:
            runner = _Runner(self._settings.vllm_python, environment, self._settings.vllm_timeout_s)
        except _RunnerDied as died:
            raise GrammarError(f"vLLM's tools builder did not start: {died}") from None
        self._runners[strict] = runner
        return runner


def version_differences(kwargs: dict[str, Any], theirs: dict[str, Any], version: str) -> list[str]:
    """What this process's xgrammar builds differently from ``theirs`` for the same call.

    Args:
        kwargs: the arguments vLLM passed to ``xgrammar.get_model_structural_tag``.
        theirs: what vLLM's xgrammar returned (its ``model_dump``).
        version: vLLM's xgrammar version.

    Returns:
        One line per differing field (a JSON pointer into the tag), or the error this xgrammar
        raises; nothing when both build the same tag.
    """
    import xgrammar

    ours_version = importlib.metadata.version("xgrammar")
    head = f"xgrammar {ours_version} builds {kwargs.get('model')!r} differently from {version}"
    try:
        ours = xgrammar.get_model_structural_tag(**kwargs).model_dump(mode="json")
    except Exception as error:  # xgrammar's own refusal is the difference
        return [f"{head}: it refuses the same call ({error})"]
    return [
        f"{head}: {pointer or '/'} is {_short(mine)} ({version}: {_short(other)})"
        for pointer, mine, other in _differences(ours, theirs, [])
    ]


_MISSING = object()


def _differences(a: Any, b: Any, parts: list[str | int]) -> list[tuple[str, Any, Any]]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in list(a) + [k for k in b if k not in a]:
            out += _differences(a.get(key, _MISSING), b.get(key, _MISSING), [*parts, key])
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        pairs = enumerate(zip(a, b, strict=True))
        return [d for i, (x, y) in pairs for d in _differences(x, y, [*parts, i])]
    return [] if a == b else [(pointer_from_parts(parts), a, b)]


def _short(value: Any) -> str:
    if value is _MISSING:
        return "absent"
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."
