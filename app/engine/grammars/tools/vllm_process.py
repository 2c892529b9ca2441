"""One ``vllm_runner.py`` process: a JSON line in, a JSON line out, one exchange at a time.

It is started with a minimal environment (:func:`runner_environment`: never the server's secrets
nor any other ``MASKSCOPE_*`` setting) and under a memory cap (``RLIMIT_DATA``, which the runner
sets on itself before it imports vLLM), in a session of its own, so that killing it kills
everything it started.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from app.exceptions import GrammarTooComplex

__all__ = [
    "KEPT_ENVIRONMENT",
    "RUNNER",
    "STRICT_ENV",
    "RunnerDied",
    "RunnerProcess",
    "runner_environment",
    "stderr_tail",
]

#: The script run with vLLM's Python.
RUNNER = Path(__file__).resolve().with_name("vllm_runner.py")
STRICT_ENV = "VLLM_ENFORCE_STRICT_TOOL_CALLING"
#: What the runner inherits from the server's environment, when set: where to find programs,
#: home, locale, temporary files and the caches tokenizers load from; nothing else.
KEPT_ENVIRONMENT = (
    "PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "XDG_CACHE_HOME", "HF_HOME", "HF_HUB_CACHE",
    "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "VLLM_CACHE_ROOT", "VLLM_CONFIG_ROOT",
    "VLLM_LOGGING_LEVEL", STRICT_ENV,
)  # fmt: skip
_STDERR_TAIL = 2000
#: How a process that ran out of memory under ``RLIMIT_DATA`` ends: Python's error, C++'s and
#: Rust's (the tokenizers), an abort, or a C extension whose failed allocation returned an error
#: without setting one (seen importing xgrammar under a 200 MB cap).
_OUT_OF_MEMORY = (
    "MemoryError",
    "bad_alloc",
    "memory allocation of",
    "Cannot allocate memory",
    "SystemError: error return without exception set",
)


def runner_environment(server: Mapping[str, str]) -> dict[str, str]:
    """The runner's environment: :data:`KEPT_ENVIRONMENT` from ``server``, and a quiet tokenizer."""
    kept = {name: server[name] for name in KEPT_ENVIRONMENT if name in server}
    kept.setdefault("PATH", os.defpath)
    kept.setdefault("LANG", "C.UTF-8")
    kept["TOKENIZERS_PARALLELISM"] = "false"  # no thread pool forked behind each call
    return kept


def stderr_tail(stream: IO[bytes]) -> str:
    """The end of what a runner wrote on ``stream`` (its stderr file)."""
    stream.seek(0, os.SEEK_END)
    size = stream.tell()
    stream.seek(max(0, size - _STDERR_TAIL))
    return stream.read().decode("utf-8", "replace").strip()


class RunnerDied(Exception):
    """The runner process ended (or never answered ready) before answering.

    Attributes:
        tail: the end of what it wrote on stderr.
        out_of_memory: whether it ended as a process past its memory cap does.
    """

    def __init__(self, tail: str, returncode: int | None) -> None:
        super().__init__(tail)
        self.tail = tail
        aborted = returncode in (-signal.SIGABRT, -signal.SIGSEGV, -signal.SIGBUS)
        self.out_of_memory = aborted or any(marker in tail for marker in _OUT_OF_MEMORY)


class RunnerProcess:
    """A started ``vllm_runner.py``; :meth:`wait_ready` waits for it to have imported vLLM.

    Args:
        python: vLLM's Python.
        environment: the whole environment it gets.
        memory_mb: its memory cap.
    """

    def __init__(
        self,
        python: Path,
        environment: dict[str, str],
        memory_mb: int,
        *,
        arguments: Sequence[str] = (),
        log: Path | None = None,
    ) -> None:
        # stderr: a file kept while it runs (a socket runner's log, which any client reads)
        self._stderr: IO[bytes] = (
            tempfile.TemporaryFile() if log is None else log.open("w+b")  # noqa: SIM115
        )
        self._process = subprocess.Popen(
            [str(python), "-I", str(RUNNER), "--memory-mb", str(memory_mb), *arguments],
            stdin=subprocess.PIPE if log is None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=environment,
            start_new_session=True,
        )
        self._buffer = b""
        self.versions: dict[str, str] = {}
        self.ready: dict[str, Any] = {}

    def wait_ready(self, timeout_s: float) -> None:
        """Wait for the line that says vLLM is imported (its versions).

        Raises:
            RunnerDied: it ended first.
            GrammarTooComplex: it took longer than ``timeout_s`` (it is killed).
        """
        hello = self._read_line(timeout_s, what="start (importing vLLM)")
        self.versions = dict(hello.get("versions", {}))
        self.ready = hello

    @property
    def alive(self) -> bool:
        """Whether the process still runs."""
        return self._process.poll() is None

    @property
    def pid(self) -> int:
        """The process id."""
        return self._process.pid

    def call(self, message: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Send one request and wait up to ``timeout_s`` for its answer.

        Raises:
            RunnerDied: it ended before answering.
            GrammarTooComplex: no answer within ``timeout_s`` (it is killed).
        """
        assert self._process.stdin is not None
        try:
            self._process.stdin.write(json.dumps(message).encode() + b"\n")
            self._process.stdin.flush()
        except (OSError, ValueError):  # a broken pipe, or closed: it has ended
            raise self._died() from None
        return self._read_line(timeout_s, what="answer")

    def _read_line(self, timeout_s: float, *, what: str) -> dict[str, Any]:
        assert self._process.stdout is not None
        try:
            fd = self._process.stdout.fileno()
        except ValueError:  # closed by kill()
            raise self._died() from None
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
                        raise self._died()
                    self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def _died(self) -> RunnerDied:
        tail = self._stderr_tail()
        self.kill()
        return RunnerDied(tail, self._process.returncode)

    def _stderr_tail(self) -> str:
        if self._stderr.closed:
            return "its process was stopped"
        return stderr_tail(self._stderr)

    def stop(self) -> None:
        """Kill the process (its whole group: it leads a session of its own), from any thread:
        the thread reading it sees it end, and :meth:`kill` then reaps it."""
        if self._process.returncode is None:
            try:
                os.killpg(self._process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        """Kill the process, reap it and close its pipes (by the thread that reads it, or once
        none does)."""
        if self._process.poll() is None:
            self.stop()
        self._process.wait()
        for stream in (self._process.stdin, self._process.stdout):
            if stream is not None:
                stream.close()
        self._stderr.close()
