"""The vLLM tools builder: the structural tag vLLM 0.32.0 applies, computed by vLLM's own code.

vLLM pins its own xgrammar (0.2.8), so its code runs in its own virtualenv
(``Settings.vllm_python``, made by ``make vllm-install``):
:mod:`app.engine.grammars.tools.vllm_runner`,
one long-lived process per builder that serves every tokenizer and every value of
``VLLM_ENFORCE_STRICT_TOOL_CALLING`` (sent with each request), under a memory cap
(``Settings.vllm_runner_memory_mb``) and with a minimal environment (:mod:`.vllm_process`). It is
started on first use by a background thread, outside the lock that orders the exchanges with it
(vLLM's imports take seconds; waiting for them holds no lock), started again when it has died,
killed when a call runs past ``Settings.vllm_timeout_s`` and on :meth:`VllmBuilder.close`.
Nothing here starts before a call, so a server without ``.venv-vllm`` starts as quickly and lists
this builder as unavailable. No answer names a path of the server (the tokenizer's directory, the
cache, the virtualenv): each is shown by its name.

What xgrammar 0.2.8 (vLLM's) and 0.2.9 (Maskscope's) build differently is not written down
anywhere: every call vLLM makes into xgrammar's builtin builders is recorded by the runner, asked
again of this process's xgrammar, and the two answers compared field by field.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.engine.grammars.request import DerivedRequest, RequestSource, derived_request
from app.engine.grammars.tools.base import BuilderName, ToolFormat, ToolsBuild, ToolsRequest
from app.engine.grammars.tools.vllm_process import (
    RUNNER,
    STRICT_ENV,
    RunnerDied,
    RunnerProcess,
    runner_environment,
)
from app.engine.grammars.tools.vllm_socket import (
    LOG,
    SOCKET,
    SocketRunner,
    runner_directory,
    start_count,
    start_lock,
)
from app.engine.stack_pins import MAKE_STACKS, Stack, configured
from app.exceptions import GrammarError, MaskscopeError
from app.paths import pointer_from_parts
from app.redact import hide_paths
from app.settings import Settings

__all__ = ["RUNNER", "StackRendered", "VllmBuilder", "build_message", "version_differences"]

#: What to run when vLLM's virtualenv is missing.
INSTALL_COMMAND = "make vllm-install"
#: The versions a build reports (the libraries that made the tag).
_BUILD_VERSIONS = ("vllm", "xgrammar")


@functools.cache
def _runner_code() -> str:
    """A digest of the files the runner runs (``vllm_runner.py`` and what it imports beside it)."""
    digest = hashlib.sha256()
    for path in (RUNNER, RUNNER.with_name("vllm_masks.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


class VllmBuilder:
    """vLLM 0.32.0's tools builder, run from vLLM's own code in its own virtualenv.

    Args:
        settings: where vLLM's Python is (``vllm_python``), how long a call may take
            (``vllm_timeout_s``) and the runner's memory cap (``vllm_runner_memory_mb``); the
            configured model's tokenizer is the one :meth:`formats` checks the parsers against.
            None: ``Settings()``.
    """

    name: BuilderName = "vllm"

    def __init__(self, settings: Settings | None = None, stack: Stack | None = None) -> None:
        self._settings = settings or Settings()
        #: the release it runs (None: the stack of the environment ``vllm_python`` names)
        self.stack = stack or _default_stack(self._settings)
        self._state = threading.Lock()  # guards the fields below, held only to read or set them
        self._runner: SocketRunner | None = None
        self._starting: Future[SocketRunner] | None = None
        self._spawned: RunnerProcess | None = None  # the process being started
        self._start_thread: threading.Thread | None = None
        self._generation = 0  # one more at each close(): a start begun before it is stopped
        self._exchange = threading.Lock()  # one request and its answer at a time
        self._formats: dict[str, list[ToolFormat]] = {}
        self._encoders: dict[str, dict[str, str]] | None = None
        self._serve_flags: dict[str, dict[str, Any]] = {}

    def __enter__(self) -> VllmBuilder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def installed(self) -> bool:
        """Whether the stack's environment is there (its Python, its layered pins)."""
        return self.stack.missing() is None

    def _not_installed(self) -> str:
        missing = self.stack.missing() or ""
        command = MAKE_STACKS if self.stack.layered else INSTALL_COMMAND
        return f"{self._hide(missing)}: run `{command}`"

    def versions(self) -> dict[str, str]:
        """What the stack's own process imports: vllm, xgrammar, llguidance, transformers
        (starts its runner when none runs).

        Raises:
            GrammarError: the stack is not installed, or its runner does not start (the
                import error it ended with).
        """
        if not self.installed:
            raise GrammarError(f"not installed: {self._not_installed()}")
        return dict(self._ready_runner().versions)

    def formats(self, *, tokenizer: str | None = None) -> list[ToolFormat]:
        """Every ``--tool-call-parser`` vLLM registers, read from vLLM at run time.

        A parser is available when vLLM's start-up check accepts it on ``tokenizer`` (None: the
        configured model's); its ``reasoning_end`` is the end marker of vLLM's reasoning parser of
        the same name, when there is one and it accepts the tokenizer. Without vLLM's
        virtualenv, one entry named ``unavailable`` says how to install it.
        """
        if not self.installed:
            return [self._unavailable(f"vLLM is not installed ({self._not_installed()})")]
        try:
            path = tokenizer if tokenizer is not None else self._default_tokenizer()
            if path not in self._formats:
                answer, _ = self._call(None, {"op": "formats", "tokenizer": path}, path)
                self._formats[path] = [
                    ToolFormat(
                        builder=self.name,
                        **{
                            **entry,
                            "reason": entry["reason"] and self._hide(entry["reason"], path),
                        },
                    )
                    for entry in answer["formats"]
                ]
        except MaskscopeError as error:  # a virtualenv that does not run, a model not there
            return [self._unavailable(self._hide(error.message))]
        return list(self._formats[path])

    def serve_flags(self, *, tokenizer: str | None = None) -> dict[str, Any]:
        """The values vLLM takes for a tools source's serve flags, read from its registries at
        run time: ``reasoning_parsers`` (``[{"name", "reasoning_end", "reason"}]``, each end
        marker on ``tokenizer``; None: the configured model's) and ``strict_levels``.

        Raises:
            GrammarError: vLLM is not installed, or its runner does not answer.
        """
        if not self.installed:
            raise GrammarError(f"not installed: {self._not_installed()}")
        path = tokenizer if tokenizer is not None else self._default_tokenizer()
        if path not in self._serve_flags:
            answer, _ = self._call(None, {"op": "serve_flags", "tokenizer": path}, path)
            parsers = [
                {**p, "reason": p["reason"] and self._hide(p["reason"], path)}
                for p in answer["reasoning_parsers"]
            ]
            self._serve_flags[path] = {
                "reasoning_parsers": parsers,
                "strict_levels": list(answer["strict_levels"]),
            }
        return self._serve_flags[path]

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
                f"the vLLM tools builder is unavailable: {self._not_installed()}",
                pointer="/builder",
            )
        message = {"op": "build", "tokenizer": tokenizer, **build_message(request)}
        answer, versions = self._call(request.strict_tool_calling, message, tokenizer)
        versions = {k: versions[k] for k in _BUILD_VERSIONS if k in versions}
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
            reason=None if answer["reason"] is None else self._hide(answer["reason"], tokenizer),
            reasoning_end=answer["reasoning_end"],
            builder_versions=dict(versions),
            notes=tuple(notes),
        )

    def derive(
        self, source: RequestSource, tokenizer: str, chat_template: str | None = None
    ) -> DerivedRequest:
        """What this stack's server makes of a pasted request on ``tokenizer``: the prompt, the
        grammar its engine masks with, the reasoning end and the end of generation.

        Args:
            source: the request source (its ``chat_template``, when given, is the one used).
            tokenizer: a directory or hub id that vLLM's tokenizer loader opens.
            chat_template: the server's ``--chat-template`` when the source gives none.

        Raises:
            GrammarError: vLLM refuses the request or a serve flag (pointed into the source),
                nothing is constrained, or the stack is unavailable.
            GrammarTooComplex: its code ran past ``vllm_timeout_s``.
        """
        if not self.installed:
            raise GrammarError(f"the stack is unavailable: {self._not_installed()}")
        message = {
            "op": "derive",
            "tokenizer": tokenizer,
            "body": source.body,
            "serve": source.serve,
            "chat_template": source.chat_template or chat_template,
        }
        answer, versions = self._call(source.serve.get("strict_tool_calling"), message, tokenizer)
        return derived_request(answer, self.stack.name, versions, source)

    def encoders(self) -> dict[str, dict[str, str]]:
        """The stack's prompt encoders, by ``--tokenizer-mode``: each mode whose tokenizer
        renders chat with a Python encoder instead of a Jinja template (vLLM's DeepSeek V3.2 /
        V4 / V4.1, where the release has them), as the stack's own registries map them, with
        ``tokenizer``, ``encoder`` and ``renderer`` (their qualified names).

        Raises:
            GrammarError: the stack is unavailable, or its runner does not answer.
        """
        if not self.installed:
            raise GrammarError(f"the stack is unavailable: {self._not_installed()}")
        if self._encoders is None:
            answer, _ = self._call(None, {"op": "encoders"}, "")
            self._encoders = {mode: dict(entry) for mode, entry in answer["encoders"].items()}
        return {mode: dict(entry) for mode, entry in self._encoders.items()}

    def render(
        self,
        tokenizer: str,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        chat_template_kwargs: dict[str, Any] | None = None,
        chat_template: str | None = None,
        tokenizer_mode: str | None = None,
    ) -> StackRendered:
        """The prompt this stack's server renders of ``messages`` on ``tokenizer``: by the
        prompt encoder of ``tokenizer_mode`` (see :meth:`encoders`), else by vLLM's chat
        renderer with ``chat_template`` (None: the tokenizer's own).

        A tool call's ``arguments`` given as an object are sent as the JSON string the OpenAI
        wire format carries (vLLM's renderer parses them back).

        Raises:
            GrammarError: vLLM refuses the messages (pointed at the field it names), the mode
                has no encoder in this release, or the stack is unavailable.
        """
        if not self.installed:
            raise GrammarError(f"the stack is unavailable: {self._not_installed()}")
        message = {
            "op": "render",
            "tokenizer": tokenizer,
            "messages": [_wire_message(m) for m in messages],
            "tools": tools,
            "add_generation_prompt": add_generation_prompt,
            "chat_template_kwargs": dict(chat_template_kwargs or {}),
            "chat_template": chat_template,
            "tokenizer_mode": tokenizer_mode,
        }
        answer, versions = self._call(None, message, tokenizer)
        by = f"{answer['rendered_by']} (vLLM {versions.get('vllm', '?')}, {self.stack.name})"
        return StackRendered(answer["text"], int(answer["prompt_tokens"]), by)

    def replay(
        self, message: dict[str, Any], tokenizer: str, strict: bool | None = None
    ) -> dict[str, Any]:
        """The rows vLLM's own scheduler masks ``message["token_ids"]`` with, on ``tokenizer``
        (``vllm_masks.replay`` in the stack's runner: its fields are that function's).

        Raises:
            GrammarError: the stack refuses the grammar or the serve flags, or is unavailable.
            GrammarTooComplex: its code ran past ``vllm_timeout_s``.
        """
        if not self.installed:
            raise GrammarError(f"the stack is unavailable: {self._not_installed()}")
        message = {**message, "op": "replay", "tokenizer": tokenizer}
        answer, _ = self._call(strict, message, tokenizer)
        return answer

    def runner_pid(self, strict_tool_calling: bool | None = None) -> int | None:
        """The id of the live runner process, if one runs (one serves every
        ``strict_tool_calling``: the argument is accepted and changes nothing)."""
        with self._state:
            runner = self._runner
        return runner.pid if runner is not None and runner.alive else None

    def start_count(self) -> int:
        """How many runners of this stack (and these settings) were ever started, by any
        process of this user: one while the first is reused."""
        return start_count(self._directory())

    def close(self) -> None:
        """Kill the runner this builder started (one it found running is left to serve
        others), and the one being started (whose build is refused)."""
        with self._state:
            self._generation += 1
            runner, self._runner = self._runner, None
            spawned, thread = self._spawned, self._start_thread
        owned = runner if runner is not None and runner.process is not None else None
        for process in (owned, spawned):
            if process is not None:
                process.stop()
        if thread is not None:
            thread.join()  # it reaps the process it started
        if owned is not None:
            with self._exchange:  # an exchange in flight ends at once: its process is gone
                owned.kill()

    def _directory(self) -> Path:
        # The runner's own code is in the key: a runner a previous Maskscope left warm is never
        # handed requests (or fields) it was not written for.
        key = json.dumps(
            [
                self.stack.name,
                str(self.stack.python),
                [str(p) for p in self.stack.paths],
                self._settings.vllm_runner_memory_mb,
                self._settings.stack_runner_idle_s,
                _runner_code(),
            ]
        )
        name = f"{self.stack.name}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"
        return runner_directory(self._settings.stack_runner_dir, name)

    def _default_tokenizer(self) -> str:
        from app.engine.model.loading import checkpoint_source

        return checkpoint_source(self._settings)

    def _call(
        self, strict: bool | None, message: dict[str, Any], tokenizer: str
    ) -> tuple[dict[str, Any], dict[str, str]]:
        """The runner's answer to ``message`` under ``strict``, and the versions it runs.

        A runner that died between calls (or in this one) is replaced once.
        """
        message = {**message, "strict": _strict_setting(strict)}
        for attempt in (1, 2):
            runner = self._ready_runner()
            try:
                with self._exchange:
                    answer = runner.call(message, self._settings.vllm_timeout_s)
                break
            except RunnerDied as died:
                with self._state:
                    if self._runner is runner:
                        self._runner = None
                if attempt == 2:
                    message_ = self._died_message(died, "ended without answering")
                    raise GrammarError(message_) from None
        if "error" in answer:
            error = answer["error"]
            loc = error.get("loc") or []
            text = self._hide(error["message"], tokenizer)
            if error.get("type") == "memory":
                text = f"{text} ({self._cap()})"
            raise GrammarError(text, pointer=pointer_from_parts(loc) if loc else None)
        return answer, dict(runner.versions)

    def _ready_runner(self) -> SocketRunner:
        """The runner (perhaps dead since: the exchange finds out), or the one being started,
        waited for with no lock held."""
        with self._state:
            if self._runner is not None:
                return self._runner
            if self._starting is None:
                self._starting = Future()
                self._start_thread = threading.Thread(
                    target=self._start,
                    args=(self._starting, self._generation),
                    name="vllm-runner-start",
                    daemon=True,
                )
                self._start_thread.start()
            starting = self._starting
        return starting.result()  # the start has its own time limit (vllm_timeout_s)

    def _start(self, future: Future[SocketRunner], generation: int) -> None:
        """Find the stack's runner, or start it and wait for it to import vLLM (in its own
        thread)."""
        runner: SocketRunner | None = None
        error: BaseException | None = None
        try:
            runner = self._attach_or_spawn(generation)
        except RunnerDied as died:
            error = GrammarError(self._died_message(died, "did not start"))
        except OSError as failed:  # vLLM's Python cannot be run
            error = GrammarError(f"vLLM's tools builder did not start: {self._hide(str(failed))}")
        except BaseException as other:  # the time limit, or anything else: the waiters get it
            error = other
        with self._state:
            self._spawned = self._starting = None
            if generation != self._generation:  # stopped by close(), or done too late for it
                error = GrammarError("vLLM's tools builder was closed while it started")
            if error is None:
                self._runner = runner
        if error is None:
            assert runner is not None
            future.set_result(runner)
            return
        if runner is not None and runner.process is not None:
            runner.kill()
        future.set_exception(error)

    def _attach_or_spawn(self, generation: int) -> SocketRunner:
        timeout = self._settings.vllm_timeout_s
        directory = self._directory()
        found = SocketRunner.attach(directory, timeout)
        if found is not None:
            return found
        with start_lock(directory):  # no other process starts it meanwhile
            found = SocketRunner.attach(directory, timeout)
            if found is not None:
                return found
            process = RunnerProcess(
                self.stack.python,
                runner_environment(os.environ),
                self._settings.vllm_runner_memory_mb,
                arguments=[
                    *[part for path in self.stack.paths for part in ("--path", str(path))],
                    *("--socket", str(directory / SOCKET)),
                    *("--idle-s", f"{self._settings.stack_runner_idle_s:g}"),
                ],
                log=directory / LOG,
            )
            with self._state:
                self._spawned = process
                if generation != self._generation:
                    process.stop()
            process.wait_ready(timeout)
            start_count(directory, add=True)
            return SocketRunner(directory, process.ready, process)

    def _cap(self) -> str:
        mb = self._settings.vllm_runner_memory_mb
        return f"its memory cap is {mb} MB, MASKSCOPE_VLLM_RUNNER_MEMORY_MB"

    def _died_message(self, died: RunnerDied, what: str) -> str:
        if died.out_of_memory:
            last = (died.tail.splitlines() or [""])[-1]
            return self._hide(
                f"vLLM's tools builder {what}: it ran out of memory ({self._cap()}): {last}"
            )
        return self._hide(f"vLLM's tools builder {what}: {died.tail}")

    def _hide(self, text: str, tokenizer: str | None = None) -> str:
        """``text`` without a path of this server: the tokenizer's directory, vLLM's
        virtualenv, the cache and the home directory are shown by their names."""
        venv = self.stack.python.parent.parent
        named = [(self._settings.cache_dir, "<cache_dir>"), (venv, venv.name)]
        named += [(path, path.name) for path in self.stack.paths]
        if self._settings.stack_runner_dir is not None:
            named.append((self._settings.stack_runner_dir, "<stack_runner_dir>"))
        if tokenizer:
            named.append((Path(tokenizer), Path(tokenizer).name))
        return hide_paths(text, named)


@dataclass(frozen=True, slots=True)
class StackRendered:
    """A prompt a stack rendered.

    Attributes:
        text: the prompt.
        prompt_tokens: its length in the stack's tokenizer's ids.
        rendered_by: the code that rendered it, with the release and the stack.
    """

    text: str
    prompt_tokens: int
    rendered_by: str


def _wire_message(message: dict[str, Any]) -> dict[str, Any]:
    """``message`` as the OpenAI wire format carries it: each tool call with an ``id``
    (``call_<index>`` when it has none) and its ``arguments`` a JSON string (an object is
    written with ``json.dumps``, its keys in order)."""
    calls = message.get("tool_calls")
    if not calls:
        return dict(message)
    wired = []
    for index, call in enumerate(calls):
        function = dict(call.get("function") or {})
        if not isinstance(function.get("arguments", ""), str):
            function["arguments"] = json.dumps(function["arguments"], ensure_ascii=False)
        wired.append({"id": f"call_{index}", **call, "function": function})
    return {**message, "tool_calls": wired}


def _default_stack(settings: Settings) -> Stack:
    """The configured stack whose environment is ``vllm_python`` (it shares that stack's
    runner), else one named ``vllm``."""
    try:
        stacks = list(configured(settings).values())
    except MaskscopeError:  # MASKSCOPE_STACKS is listed unavailable where it is read
        stacks = []
    own = [s for s in stacks if not s.layered and s.python == settings.vllm_python]
    return own[0] if own else Stack("vllm", settings.vllm_python)


def build_message(request: ToolsRequest) -> dict[str, Any]:
    """What the runner's ``build`` (and a replay of a ``tools`` source) is told of ``request``."""
    return {
        "format": request.format,
        "tools": list(request.tools),
        "tool_choice": request.tool_choice,
        "reasoning": request.reasoning,
        "parallel_tool_calls": request.parallel_tool_calls,
        "strict_level": request.strict_level,
        "reasoning_parser": request.reasoning_parser,
        "response_format": request.response_format,
    }


def _strict_setting(strict: bool | None) -> str | None:
    """``VLLM_ENFORCE_STRICT_TOOL_CALLING`` for a request: None is the server's own (unset:
    vLLM's default)."""
    if strict is None:
        return os.environ.get(STRICT_ENV)
    return "1" if strict else "0"


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
