"""The Doctor in worker processes: killable, memory-capped, stopped when its request ends.

xgrammar's and jsonschema's native calls cannot be interrupted in a thread, and a hostile schema
can make an examination loop or allocate without bound. Each examination therefore runs in a
spawned process (:func:`serve`), whose address space is capped (``RLIMIT_AS``) once it has
loaded its libraries and the tokenizer. The process holds no compiler and no sandbox: the
compiles and the keyword probe it needs go through the server's engine (its compile workers and
cache), and a Pydantic model's validation through the server's sandbox, each asked for over the
pipe, so the report is the one :meth:`Doctor.examine` gives in-process.

Every compile goes to the server, a ``tools`` source's too: the server built its tag (vLLM's
builder runs in the server's runner, cold-started there before the examination), so a worker
never starts a builder or loads a tokenizer of its own while it examines. Start-up (libraries,
the tokenizer, its sorted vocabulary, llguidance's tokenizer) is done before the process says it
is ready, and never counted against an examination.

The server side (:class:`DoctorWorkers`) kills a process when its request ends (``stop``), when
its safety stop passes (``doctor_time_limit_s`` of the worker's own time: the time the server
spends answering its calls is not counted; a 503 ``cut_short_by_load``: the work is bounded by
counts, so only load can take it there), and at once on :meth:`DoctorWorkers.close` (the app's
shutdown); a killed process is replaced in the background.
"""

from __future__ import annotations

import functools
import itertools
import logging
import multiprocessing
import os
import pickle
import queue
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, cast

from app.doctor.doctor import RUNNING_AT_ONCE, Doctor, PydanticSource
from app.doctor.records import DoctorReport
from app.doctor.safety import Deadline
from app.doctor.tools_roundtrip import with_template_finding
from app.engine.engine import AnyEngine, Engine
from app.engine.grammars.compile_worker import cap_memory
from app.engine.grammars.keyword_probe import ProbeResult
from app.engine.grammars.spec import CompileResult, GrammarSpec
from app.engine.records import Validation
from app.engine.tokens import Tokens
from app.exceptions import (
    CutShortByLoad,
    GrammarTooComplex,
    MaskscopeError,
    NotReady,
    RequestEnded,
)
from app.settings import Settings

__all__ = ["DoctorProcesses", "DoctorWorkers", "Stop", "serve"]

log = logging.getLogger(__name__)

_STARTUP_TIMEOUT_S = 300.0
_POLL_S = 0.05
_SHUTTING_DOWN = "the server is shutting down: the Doctor's examination was stopped"
#: What the warm-up encodes: JSON's punctuation, digits, escapes and non-ASCII text.
_WARM_TEXT = '{"a": [1, -2.5e3, true, null], "b": "x\\n\u00e9"}'


class Stop:
    """Set by the caller to stop an examination; holds the pid of the process running it."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.pid: int | None = None

    def set(self) -> None:
        """Stop the examination (its process is killed within a poll)."""
        self._event.set()

    def is_set(self) -> bool:
        """Whether the examination was told to stop."""
        return self._event.is_set()


def carried(error: MaskscopeError) -> tuple[type[MaskscopeError], dict[str, Any]]:
    """``error`` as it crosses the pipe: its class (pickled by name) and its fields."""
    return type(error), error.to_dict()


def rebuilt(cls: type[MaskscopeError], data: dict[str, Any]) -> MaskscopeError:
    """The error :func:`carried` sent, of its own class (so of its own HTTP status)."""
    try:
        return cls(data["message"], line=data.get("line"), column=data.get("column"),
                   pointer=data.get("pointer"))  # fmt: skip
    except TypeError:  # a subclass with other arguments: the code still names it
        return MaskscopeError.from_dict(data)


# --- the worker process -------------------------------------------------------------------


class _Link:
    """The worker's end of the pipe: a reader thread answers calls, requests go to ``inbox``."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._send_lock = threading.Lock()
        self._calls: dict[int, Future[Any]] = {}
        self._ids = itertools.count()
        self.inbox: queue.Queue[tuple[Any, ...]] = queue.Queue()
        threading.Thread(target=self._read, name="doctor-link", daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                message = self._conn.recv()
            except (EOFError, OSError):  # the server is gone: nobody wants this work any more
                os._exit(0)
            except Exception:  # a garbled message: die, the server then says so (never waits)
                os._exit(1)
            if message[0] == "reply":
                _, call_id, ok, payload = message
                future = self._calls.pop(call_id)
                if ok:
                    future.set_result(payload)
                else:
                    future.set_exception(rebuilt(*payload))
            else:
                self.inbox.put(message)

    def send(self, message: tuple[Any, ...]) -> None:
        with self._send_lock:
            self._conn.send(message)

    def call(self, op: str, *args: Any) -> Any:
        """Ask the server for ``op`` and wait for its answer (its error is raised here)."""
        call_id = next(self._ids)
        future: Future[Any] = Future()
        self._calls[call_id] = future
        self.send(("call", call_id, op, args))
        return future.result()


@dataclass(frozen=True)
class _TokensOnly:
    """The part of a model the Doctor uses: its tokenizer."""

    tokens: Tokens


class _ServerCompiler:
    """Compiles through the server's engine (its workers and cache), over the link."""

    def __init__(self, link: _Link, tokenizer_info: Any) -> None:
        self._link = link
        self._info = tokenizer_info

    def compile(self, spec: GrammarSpec) -> CompileResult:
        import xgrammar as xgr

        answer = self._link.call("compile", spec)
        return CompileResult(
            spec=spec,
            compiled=xgr.CompiledGrammar.deserialize_json(answer["serialized"], self._info),
            grammar_text=answer["grammar_text"],
            rule_names=tuple(answer["rule_names"]),
            warnings=tuple(answer["warnings"]),
            compile_ms=float(answer["compile_ms"]),
            size_bytes=int(answer["size_bytes"]),
            cached=bool(answer["cached"]),
            not_carried=tuple(answer["not_carried"]),
            tools=answer["tools"],
            unconstrained=tuple(answer["unconstrained"]),
        )

    def cached(self, spec: GrammarSpec) -> CompileResult | None:
        return None

    def probe_keywords(
        self, spec: GrammarSpec, pointers: list[str], *, budget_s: float
    ) -> ProbeResult:
        return cast(ProbeResult, self._link.call("probe", spec, pointers, budget_s))


class _ServerEngine(Engine[Any]):
    """The worker's engine: every compile is the server's, a ``tools`` source's build included
    (never a builder started here, mid-examination, with its own tokenizer to load)."""

    def compile(self, spec: GrammarSpec) -> CompileResult:
        """``spec`` compiled by the server's engine (its cache holds the request already)."""
        return self.compiler.compile(spec)


def _examine(
    doctor: Doctor, link: _Link, request: dict[str, Any], memory_mb: int
) -> tuple[Any, ...]:
    pydantic = None
    if request["pydantic"] is not None:
        source, root = request["pydantic"]
        pydantic = PydanticSource(source, root, functools.partial(link.call, "validate"))
    try:
        report = doctor.examine(
            request["spec"],
            seed=request["seed"],
            budget_ms=request["budget_ms"],
            pydantic=pydantic,
            max_tokens=request["max_tokens"],
        )
    except MaskscopeError as error:
        return ("error", *carried(error))
    except MemoryError:
        message = (
            "too complex for the Doctor: examining this schema needs more than the "
            f"{memory_mb} MB a Doctor process may use (MASKSCOPE_DOCTOR_MEMORY_MB)"
        )
        return ("error", *carried(GrammarTooComplex(message)))
    except Exception as error:  # a bug met on this input: said plainly, logged by the server
        return ("failed", f"{type(error).__name__}: {error}", traceback.format_exc())
    return ("done", report)


def serve(conn: Connection, setup: dict[str, Any], settings: Settings) -> None:
    """Worker process entry point: examine requests until the pipe closes.

    Args:
        conn: the pipe to the server.
        setup: the tokenizer as :func:`_setup` packs it.
        settings: the server's settings (limits; ``doctor_memory_mb``).
    """
    import xgrammar as xgr

    info = xgr.TokenizerInfo.deserialize_json(setup["info"])
    tokens = Tokens(
        tokenizer=pickle.loads(setup["tokenizer"]),
        info=info,
        vocab_size=setup["vocab_size"],
        token_bytes=setup["token_bytes"],
        stop_ids=setup["stop_ids"],
        special_ids=setup["special_ids"],
    )
    link = _Link(conn)
    model, compiler = cast(Any, _TokensOnly(tokens)), cast(Any, _ServerCompiler(link, info))
    engine = _ServerEngine(model, compiler, settings, owns_compiler=False)
    doctor = Doctor(engine, round_trip=False)  # the server adds the round trip's findings
    _warm_up(doctor, engine)
    cap_memory(settings.doctor_memory_mb)
    link.send(("ready",))
    while True:
        message = link.inbox.get()
        if message[0] == "examine":
            link.send(_examine(doctor, link, message[1], settings.doctor_memory_mb))


def _warm_up(doctor: Doctor, engine: Engine[Any]) -> None:
    """What the first examination would otherwise load, while nothing is counted: the sorted
    vocabulary, llguidance's tokenizer (built beside the first witness search, it held the GIL
    and took that search from ~30 ms to 0.3-0.45 s) and the tokenizer's first encode."""
    doctor.vocab()
    engine.llguidance.tokenizer()
    for token in doctor.tokens.encode(_WARM_TEXT):
        doctor.tokens.output_bytes(token)


# --- the server side ----------------------------------------------------------------------


def _setup(tokens: Tokens) -> dict[str, Any]:
    """What a worker needs to rebuild ``tokens``."""
    return {
        "tokenizer": pickle.dumps(tokens.tokenizer),
        "info": tokens.info.serialize_json(),
        "vocab_size": tokens.vocab_size,
        "token_bytes": tokens.token_bytes,
        "stop_ids": tokens.stop_ids,
        "special_ids": tokens.special_ids,
    }


class _Process:
    """One worker process (spawned: it must not inherit torch's threads) and its pipe."""

    def __init__(self, setup: dict[str, Any], settings: Settings) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(
            target=serve, args=(child, setup, settings), name="maskscope-doctor", daemon=True
        )
        self.process.start()
        child.close()
        self.ready = False
        # One lock per pipe: a late answer to an earlier examination's call (a slow compile it
        # gave up on) must not interleave its bytes with the next examination's messages.
        self._send_lock = threading.Lock()

    def send(self, message: tuple[Any, ...]) -> None:
        with self._send_lock:
            self.conn.send(message)

    @property
    def pid(self) -> int:
        return cast(int, self.process.pid)

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5)
        self.conn.close()


class DoctorWorkers:
    """The Doctor's worker processes for one engine (its tokenizer), started on first use.

    Args:
        engine: the engine whose compiles (and tokenizer) the examinations use.
        settings: ``doctor_memory_mb`` and the limits the worker's engine knows.
        size: processes kept; examinations beyond it wait for the pool's threads anyway.
        hard_limit: seconds of its own work an examination with a given ``budget_ms`` may take
            before its process is killed (default: ``settings.doctor_time_limit_s``).
    """

    def __init__(
        self,
        engine: AnyEngine,
        settings: Settings,
        *,
        size: int = RUNNING_AT_ONCE,
        hard_limit: Callable[[int], float] | None = None,
    ):
        self._engine = engine
        self._hard_limit = hard_limit or (lambda _budget_ms: settings.doctor_time_limit_s)
        self._settings = settings
        self._size = size
        self._setup: dict[str, Any] | None = None
        self._lock = threading.Lock()
        self._idle: list[_Process] = []
        self._busy: set[_Process] = set()
        self._closed = False
        self._calls = ThreadPoolExecutor(max_workers=4 * size, thread_name_prefix="doctor-call")

    @property
    def busy_pids(self) -> list[int]:
        """The pids of the processes examining now."""
        with self._lock:
            return sorted(p.pid for p in self._busy)

    def examine(
        self,
        spec: GrammarSpec,
        *,
        seed: int,
        budget_ms: int,
        pydantic: PydanticSource | None,
        max_tokens: int | None,
        stop: Stop | None = None,
    ) -> DoctorReport:
        """:meth:`Doctor.examine` in a worker process, on this thread's time.

        The request is compiled here first (through the engine's cache: a schema that does not
        compile is the same 422 as in-process; a tools builder's cold start is paid here), then
        examined within the safety stop, which counts the worker's own time only. A ``tools``
        source's template round trip is run here after, on this thread (its builds need the
        server's builders).

        Raises:
            GrammarError: the request does not compile.
            GrammarTooComplex: the examination ran past its memory limit, or met a bug
                (logged).
            CutShortByLoad: it ran past its safety stop (``doctor_time_limit_s``), or its
                process did not start in time; the process is killed.
            RequestEnded: ``stop`` was set (the client left); the process is killed.
            NotReady: the workers are shut down (the server is stopping), or a process could
                not start.
        """
        self._engine.compile(spec)
        worker = self._take(stop)
        if stop is not None:
            stop.pid = worker.pid
        request = {"spec": spec, "seed": seed, "budget_ms": budget_ms,
                   "pydantic": (pydantic.source, pydantic.root) if pydantic else None,
                   "max_tokens": max_tokens}  # fmt: skip
        handed_back = False
        try:
            worker.send(("examine", request))
            answer = self._serve(worker, pydantic, budget_ms, stop)
            handed_back = True
        except (EOFError, OSError):
            if self._closed:  # killed by close(), not by what it was examining
                raise NotReady(_SHUTTING_DOWN) from None
            raise self._died(worker) from None
        finally:
            self._release(worker, keep=handed_back)
        # Here, where the builders are: the round trip builds the tag with reasoning off and on.
        return with_template_finding(self._result(answer), self._engine, spec)

    def _serve(
        self, worker: _Process, pydantic: PydanticSource | None, budget_ms: int, stop: Stop | None
    ) -> tuple[Any, ...]:
        """Answer the worker's calls until it answers; kill it on a stop or past the limit
        (the worker's own time: the clock stops while the server answers one of its calls)."""
        limit = self._hard_limit(budget_ms)
        own = Deadline(limit)
        while True:
            if self._closed:
                raise NotReady(_SHUTTING_DOWN)
            if stop is not None and stop.is_set():
                raise RequestEnded("the client left: the Doctor's examination was stopped")
            if own.expired():
                raise CutShortByLoad(
                    f"cut short by load: the Doctor's examination ran past its wall-clock "
                    f"safety stop of {limit:g} s of its own work (MASKSCOPE_DOCTOR_TIME_LIMIT_S; "
                    "its start-up and the compiles the server made for it not counted) and was "
                    "stopped. Its work is a fixed count, so the machine is too busy: try again"
                )
            if not worker.conn.poll(_POLL_S):
                if not worker.process.is_alive() and not worker.conn.poll():
                    raise EOFError
                continue
            message = worker.conn.recv()
            if message[0] != "call":
                return cast(tuple[Any, ...], message)
            call = functools.partial(self._answer_paused, own, worker, pydantic, *message[1:])
            self._calls.submit(call)

    def _answer_paused(self, own: Deadline, worker: _Process, *args: Any) -> None:
        with own.paused():  # the server's work: its own limits bound it, its queue is load
            self._answer(worker, *args)

    def _answer(
        self,
        worker: _Process,
        pydantic: PydanticSource | None,
        call_id: int,
        op: str,
        args: Sequence[Any],
    ) -> None:
        try:
            payload, ok = self._call(op, args, pydantic), True
        except MaskscopeError as error:
            payload, ok = carried(error), False
        except Exception as error:  # the worker must get an answer, or it waits forever
            log.exception("the Doctor's %s call failed", op)
            payload, ok = carried(GrammarTooComplex(f"the Doctor's {op} failed: {error}")), False
        try:
            worker.send(("reply", call_id, ok, payload))
        except (OSError, ValueError):  # the worker was killed meanwhile
            pass

    def _call(self, op: str, args: Sequence[Any], pydantic: PydanticSource | None) -> Any:
        if op == "compile":
            result = self._engine.compile(args[0])
            return {
                "serialized": result.compiled.serialize_json(),
                "grammar_text": result.grammar_text,
                "rule_names": list(result.rule_names),
                "warnings": list(result.warnings),
                "compile_ms": result.compile_ms,
                "size_bytes": result.size_bytes,
                "cached": result.cached,
                "not_carried": list(result.not_carried),
                "tools": result.tools,  # a tools source's build: the Doctor reads its tag
                "unconstrained": list(result.unconstrained),
            }
        if op == "probe":
            spec, pointers, budget_s = args
            return self._engine.compiler.probe_keywords(spec, pointers, budget_s=budget_s)
        if op == "validate" and pydantic is not None:
            validated: list[Validation] = pydantic.validate_many(args[0])
            return validated
        raise ValueError(f"unknown call {op!r}")

    def _result(self, answer: tuple[Any, ...]) -> DoctorReport:
        if answer[0] == "done":
            return cast(DoctorReport, answer[1])
        if answer[0] == "error":
            raise rebuilt(answer[1], answer[2])
        log.error("the Doctor failed on a schema: %s\n%s", answer[1], answer[2])
        raise GrammarTooComplex(
            f"the Doctor cannot examine this schema: {answer[1]} (a bug; the server log has "
            "the traceback)"
        )

    def _died(self, worker: _Process) -> GrammarTooComplex:
        worker.process.join(timeout=1)
        code = worker.process.exitcode
        return GrammarTooComplex(
            f"too complex for the Doctor: its process died while examining (exit code {code}); "
            f"it may have needed more than the {self._settings.doctor_memory_mb} MB it may use "
            "(MASKSCOPE_DOCTOR_MEMORY_MB)"
        )

    def _take(self, stop: Stop | None) -> _Process:
        """An idle process, or a new one; waits until it is ready."""
        with self._lock:
            if self._closed:
                raise NotReady("the server is shutting down: the Doctor takes no more work")
            # One that has started first (a replacement may still be importing its libraries).
            ranked = sorted(self._idle, key=lambda p: not (p.ready or p.conn.poll()))
            worker = ranked[0] if ranked else None
            if worker is not None:
                self._idle.remove(worker)
                self._busy.add(worker)
        if worker is None:
            # Outside the lock (the setup takes seconds on a busy machine): a shutdown's close()
            # takes it too, and must kill the workers at once rather than wait for a new one.
            setup = self._setup if self._setup is not None else _setup(self._engine.model.tokens)
            worker = _Process(setup, self._settings)
            with self._lock:
                self._setup = setup
                closed = self._closed
                if not closed:
                    self._busy.add(worker)
            if closed:
                worker.kill()
                raise NotReady(_SHUTTING_DOWN)
        try:
            if not worker.ready:
                self._wait_ready(worker, stop)
        except RequestEnded:
            # The client left while the process was starting: it goes on starting for the next
            # examination (killing it would make every request of a fast typist start afresh).
            self._release(worker, keep=True)
            raise
        except BaseException:
            self._release(worker, keep=False)
            raise
        return worker

    def _wait_ready(self, worker: _Process, stop: Stop | None) -> None:
        deadline = time.monotonic() + _STARTUP_TIMEOUT_S
        while not worker.conn.poll(_POLL_S):
            if self._closed:
                raise NotReady("the server is shutting down: the Doctor takes no more work")
            if stop is not None and stop.is_set():
                raise RequestEnded("the client left while the Doctor's process was starting")
            if not worker.process.is_alive() and not worker.conn.poll():
                raise NotReady(
                    f"the Doctor's process did not start (exit code {worker.process.exitcode})"
                )
            if time.monotonic() > deadline:
                raise CutShortByLoad(
                    f"cut short by load: the Doctor's process did not start within "
                    f"{_STARTUP_TIMEOUT_S:g} s (no schema was examined yet): try again"
                )
        try:
            worker.conn.recv()
        except (EOFError, OSError):  # killed while starting (by close()), or it crashed
            if self._closed:
                raise NotReady(_SHUTTING_DOWN) from None
            code = worker.process.exitcode
            raise NotReady(f"the Doctor's process did not start (exit code {code})") from None
        worker.ready = True

    def _release(self, worker: _Process, *, keep: bool) -> None:
        """Hand ``worker`` back, or kill it and start its replacement (the next examination
        then finds it started, or nearly)."""
        with self._lock:
            self._busy.discard(worker)
            if keep and not self._closed and len(self._idle) < self._size:
                self._idle.append(worker)
                return
        worker.kill()
        with self._lock:
            if not self._closed and self._setup is not None and len(self._idle) < self._size:
                self._idle.append(_Process(self._setup, self._settings))

    def close(self) -> None:
        """Kill every worker process now, busy or idle; examinations running end with
        ``NotReady`` and new ones are refused (a second call does nothing)."""
        with self._lock:
            self._closed = True
            workers = [*self._idle, *self._busy]
            self._idle.clear()
        for worker in workers:
            if worker.process.is_alive():
                worker.process.kill()
        for worker in workers:
            worker.process.join(timeout=5)
        self._calls.shutdown(wait=False, cancel_futures=True)


class DoctorProcesses:
    """The Doctor's worker processes of every engine of an app (each has its tokenizer).

    Args:
        settings: the app's settings.
    """

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._lock = threading.Lock()
        self._by_engine: weakref.WeakKeyDictionary[AnyEngine, DoctorWorkers] = (
            weakref.WeakKeyDictionary()
        )
        self._closed = False

    def of(self, engine: AnyEngine) -> DoctorWorkers:
        """The workers of ``engine`` (made on first use).

        Raises:
            NotReady: the app is shutting down.
        """
        with self._lock:
            if self._closed:
                raise NotReady("the server is shutting down: the Doctor takes no more work")
            workers = self._by_engine.get(engine)
            if workers is None:
                workers = self._by_engine[engine] = DoctorWorkers(engine, self._settings)
            return workers

    @property
    def busy_pids(self) -> list[int]:
        """The pids of every process examining now."""
        with self._lock:
            every = list(self._by_engine.values())
        return sorted(pid for workers in every for pid in workers.busy_pids)

    def close(self) -> None:
        """Kill every Doctor process at once (the app's shutdown); later examinations are
        refused with ``NotReady``."""
        with self._lock:
            self._closed = True
            every = list(self._by_engine.values())
        for workers in every:
            workers.close()
