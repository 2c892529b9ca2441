"""Compile grammars in killable, memory-capped worker processes, with a cache that keeps their
warnings.

A compile hands back what its answer shows; the compiled grammar (its token masks) stays in the
worker until something needs it (:class:`_HeldGrammar`): moving it costs more than the compile
(serialising ~3x, deserialising ~1.5x on the default tokenizer), and most compiles (the page
compiles as the schema is edited) never start a session.
"""

from __future__ import annotations

import dataclasses
import hashlib
import multiprocessing
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import xgrammar as xgr

from app.engine.grammars import compile_worker
from app.engine.grammars.keyword_probe import KeywordProbe, ProbeResult
from app.engine.grammars.spec import CompileResult, GrammarKind, GrammarSpec
from app.engine.grammars.structural_tag import TAG_NOT_CARRIED
from app.engine.handoff import FairHandoff
from app.exceptions import GrammarError, GrammarTooComplex, InvalidInput, MaskscopeError
from app.settings import Settings

__all__ = ["MEMORY_MB", "GrammarCompiler"]

_STARTUP_TIMEOUT_S = 300.0
_POLL_S = 0.05
# Workers found dead that one request may pass over, beyond one per worker.
_GONE_RETRIES = 2
# A worker keeps the grammars it compiled within this share of its memory cap.
_HELD_SHARE = 4
# What a worker may map beyond what it holds once loaded (the tokenizer, xgrammar, jsonschema).
MEMORY_MB = 2048


class _Worker:
    """One compile process (spawned: it must not inherit torch's threads) and its pipe.

    ``use`` is held for each request: a fetch for a grammar this worker holds waits for the
    compile it may be running.
    """

    def __init__(self, tokenizer_info_json: str, memory_mb: int, held_bytes: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(
            target=compile_worker.serve,
            args=(child, tokenizer_info_json, memory_mb, held_bytes),
            name="maskscope-compile",
            daemon=True,
        )
        self._process.start()
        child.close()
        self._ready = False
        self._closing = threading.Lock()
        self._closed = False
        self.use = threading.Lock()

    def _receive(self, timeout: float) -> dict[str, Any] | None:
        """The next answer, or None after ``timeout``; EOFError as soon as the process dies."""
        conn: Connection = self._conn
        deadline = time.monotonic() + timeout
        while not conn.poll(min(_POLL_S, max(0.0, deadline - time.monotonic()))):
            if not self._process.is_alive() and not conn.poll():
                raise EOFError
            if time.monotonic() >= deadline:
                return None
        try:
            answer: dict[str, Any] = conn.recv()
        except (EOFError, OSError):
            raise
        except Exception:  # a garbled answer (the worker died writing it): as dead
            raise EOFError from None
        return answer

    def request(self, payload: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send one compile request; raise GrammarTooComplex on timeout or a crash, and
        ``_Gone`` when the worker was dead before the request reached it."""
        if not self._ready:
            self._started()
        try:
            self._conn.send(payload)
        except OSError:  # dead before this request: not its fault
            raise _Gone from None
        try:
            answer = self._receive(timeout)
        except (EOFError, OSError):
            code = self._process.exitcode
            status = "" if code is None else f" (exit code {code})"
            raise GrammarTooComplex(
                f"too complex: the compiler process died while compiling{status}"
            ) from None
        if answer is None:
            raise GrammarTooComplex(
                f"too complex: compiling took longer than the {timeout:g} s limit"
            )
        if answer.get("retire"):  # it exits after this answer: replaced like a killed one
            raise _Retired(answer)
        return answer

    def _started(self) -> None:
        """Wait for the process to be ready; ``_Gone`` when it died starting."""
        try:
            if self._receive(_STARTUP_TIMEOUT_S) is None:
                raise GrammarError("the grammar compiler process did not start")
        except (EOFError, OSError):
            raise _Gone from None
        self._ready = True

    @property
    def alive(self) -> bool:
        return self._process.is_alive()

    @property
    def closed(self) -> bool:
        """Whether the compiler took it out of service (killed, or about to be)."""
        return self._closed

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def close(self) -> None:
        # Twice at once on a shutdown: the compiler's close and the compile that lost it.
        with self._closing:
            if self._closed:
                return
            self._closed = True
            if self._process.is_alive():
                self._process.kill()
            self._process.join(timeout=5)
            self._conn.close()


class _Gone(Exception):
    """The worker was dead before a request reached it (killed for another request, or it
    died starting): the request is sent to another worker."""


class _Retired(Exception):
    """A worker answered and exits (its compile ran on past the answer, or ran out of memory)."""

    def __init__(self, answer: dict[str, Any]) -> None:
        super().__init__("the compile worker retired")
        self.answer = answer


class _HeldGrammar(xgr.CompiledGrammar):  # type: ignore[misc]  # xgrammar ships no stubs
    """A compiled grammar that the worker which compiled it still holds, brought over (and
    deserialised) on first use: building a matcher, or reading it in any other way.

    The worker may be gone by then (killed for another compile's time limit, or the grammar
    evicted from what it holds): ``fetch`` then compiles it again, which gives the same grammar.
    Which thread uses it first pays the transfer; none of them is the event loop (compiles,
    sessions and replays run in the worker pools).
    """

    def __init__(self, fetch: Callable[[], str], tokenizer_info: Any) -> None:
        # No _init_handle: the handle is made on first use, by the property below.
        self._fetch = fetch
        self._tokenizer_info = tokenizer_info
        self._lock = threading.Lock()
        self._serialized: str | None = None
        self._resolved: Any = None

    @property
    def _handle(self) -> Any:
        resolved = self._resolved
        if resolved is None:
            with self._lock:
                if self._resolved is None:
                    text = self._serialized or self._fetch()
                    grammar = xgr.CompiledGrammar.deserialize_json(text, self._tokenizer_info)
                    self._resolved, self._serialized = grammar._handle, None
                resolved = self._resolved
        return resolved

    def serialize_json(self) -> str:
        """The serialised compiled grammar, as the worker wrote it (nothing deserialised here
        when nothing used it yet: the Doctor's worker takes it as it is)."""
        with self._lock:
            if self._resolved is None:
                self._serialized = self._serialized or self._fetch()
                return self._serialized
        return str(self._resolved.serialize_json())


class GrammarCompiler:
    """Compiles grammar requests for one tokenizer, caching results by (request, tokenizer).

    Each compile runs in a worker process that serves one compile at a time, so the warnings
    xgrammar prints are captured per compile and never mixed, and a compile past its time limit is
    ended by killing its worker. A cache hit returns the original warnings and figures.

    Args:
        tokenizer_info: the ``xgrammar.TokenizerInfo`` masks are built for.
        workers: number of worker processes (concurrent compiles).
        timeout_s: wall-clock limit of one compile.
        cache_bytes: budget of the cache, counted in xgrammar's compiled-grammar sizes.
        memory_mb: memory a worker may map beyond what it holds once loaded; a compile past it
            fails with ``GrammarTooComplex`` (0: no cap).
    """

    def __init__(
        self,
        tokenizer_info: Any,
        *,
        workers: int = 2,
        timeout_s: float = 30.0,
        cache_bytes: int = 512 * 1024 * 1024,
        memory_mb: int = MEMORY_MB,
    ) -> None:
        self._tokenizer_info = tokenizer_info
        self._memory_mb = memory_mb
        held = memory_mb * 1024 * 1024 // _HELD_SHARE if memory_mb else cache_bytes
        self._held_bytes = min(cache_bytes, held)
        self._tokenizer_json: str = tokenizer_info.serialize_json()
        self.tokenizer_key = hashlib.sha256(self._tokenizer_json.encode()).hexdigest()[:16]
        self._timeout_s = timeout_s
        self._cache_bytes = cache_bytes
        self._cache: OrderedDict[str, CompileResult] = OrderedDict()
        self._cache_size = 0
        self._lock = threading.Lock()
        self._idle: FairHandoff[_Worker] = FairHandoff()
        self._workers = workers
        self._closed = False
        self._live: set[_Worker] = set()  # every worker process, idle or busy
        for _ in range(workers):
            self._start_worker()

    @classmethod
    def from_settings(cls, tokenizer_info: Any, settings: Settings) -> GrammarCompiler:
        """A compiler for ``tokenizer_info`` with the settings' workers, time limit, cache and
        memory cap."""
        return cls(
            tokenizer_info,
            workers=settings.compile_workers,
            timeout_s=settings.compile_timeout_s,
            cache_bytes=settings.compile_cache_bytes,
            memory_mb=settings.compile_memory_mb,
        )

    def compile(self, spec: GrammarSpec) -> CompileResult:
        """Compile ``spec``, or return the cached result (with ``cached=True``).

        Raises:
            GrammarError: the source does not parse or xgrammar refuses it; carries the line and
                column or the JSON pointer where known.
            GrammarTooComplex: the compile ran past the time limit or crashed its worker.
        """
        hit = self.cached(spec)
        if hit is not None:
            return hit
        key = self._key(spec)
        answer, worker = self._run(spec, key)
        if "serialized" in answer:
            compiled = xgr.CompiledGrammar.deserialize_json(
                answer["serialized"], self._tokenizer_info
            )
        else:
            compiled = _HeldGrammar(lambda: self._fetch(worker, spec, key), self._tokenizer_info)
        result = CompileResult(
            spec=spec,
            compiled=compiled,
            grammar_text=answer["grammar_text"],
            rule_names=tuple(answer["rule_names"]),
            warnings=tuple(answer["warnings"]),
            compile_ms=float(answer["compile_ms"]),
            size_bytes=int(answer["size_bytes"]),
            not_carried=TAG_NOT_CARRIED if spec.kind is GrammarKind.STRUCTURAL_TAG else (),
        )
        self._remember(key, result)
        return result

    def _fetch(self, worker: _Worker, spec: GrammarSpec, key: str) -> str:
        """The serialised grammar ``worker`` holds under ``key``, else compiled again.

        A worker the fetch kills or retires is replaced before another request can reach it
        (its lock is still held). Serialising past the worker's memory raises that error: a
        compile would only run out of memory again.

        Raises:
            GrammarTooComplex: serialising the grammar needs more memory than a worker has.
        """
        with worker.use:
            answer = self._fetched(worker, key)
        if answer is not None and "serialized" in answer:
            return str(answer["serialized"])
        if answer is not None and answer.get("retire"):
            raise MaskscopeError.from_dict(answer["error"])
        again, _ = self._run(spec, key, serialize=True)
        return str(again["serialized"])

    def _fetched(self, worker: _Worker, key: str) -> dict[str, Any] | None:
        """``worker``'s answer to a fetch (its ``use`` held), or None when it is gone."""
        if worker.closed or not worker.alive:
            self._replace(worker)
            return None
        try:
            return worker.request({"op": "fetch", "key": key}, self._timeout_s)
        except _Retired as retired:
            self._replace(worker)
            return retired.answer
        except (GrammarError, _Gone):  # killed, died or hung: never handed to another request
            self._replace(worker)
            return None

    def cached(self, spec: GrammarSpec) -> CompileResult | None:
        """The cached result for ``spec`` (``cached=True``), or None; never waits for a worker."""
        key = self._key(spec)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
            return hit

    def _key(self, spec: GrammarSpec) -> str:
        return f"{self.tokenizer_key}:{spec.cache_key()}"

    def probe_keywords(
        self, spec: GrammarSpec, pointers: list[str], *, budget_s: float
    ) -> ProbeResult:
        """Convert a JSON Schema again without each keyword named, in a worker process.

        Args:
            spec: a JSON Schema grammar request (its options are used for every conversion).
            pointers: JSON pointers of the keywords, in the order to probe them.
            budget_s: stop probing after this long; the result says it was cut short.

        Raises:
            InvalidInput: the spec is not a JSON Schema.
            GrammarTooComplex: one conversion ran past the compile time limit.
            GrammarError: the source does not parse (an integer too long to read, with its
                pointer).
        """
        if spec.kind is not GrammarKind.JSON_SCHEMA:
            raise InvalidInput(f"only JSON Schemas have keywords to probe, not {spec.kind.value}")
        payload = {"op": "probe", "source": spec.source, "options": spec.options.to_dict(),
                   "pointers": pointers, "budget_s": budget_s}  # fmt: skip
        answer = self._send(payload)
        return ProbeResult(
            probes=tuple(
                KeywordProbe(p["pointer"], bool(p["identical"]), tuple(p["warnings"]))
                for p in answer["probes"]
            ),
            warnings=tuple(answer["warnings"]),
            cut_short=bool(answer["cut_short"]),
            ms=float(answer["ms"]),
        )

    def _run(
        self, spec: GrammarSpec, key: str, *, serialize: bool = False
    ) -> tuple[dict[str, Any], _Worker]:
        """Compile ``spec`` in a worker: its answer (raised when it is an error) and the worker,
        which holds the compiled grammar unless the answer carries it (``serialize``)."""
        payload = {
            "kind": spec.kind.value,
            "source": spec.source,
            "options": spec.options.to_dict(),
            "key": None if serialize else key,
        }
        answer, worker = self._send_to_worker(payload)
        if not answer["ok"]:
            raise MaskscopeError.from_dict(answer["error"])
        return answer, worker

    def _send(self, payload: dict[str, Any]) -> dict[str, Any]:
        answer, _ = self._send_to_worker(payload)
        if not answer["ok"]:
            raise MaskscopeError.from_dict(answer["error"])
        return answer

    def _send_to_worker(self, payload: dict[str, Any]) -> tuple[dict[str, Any], _Worker]:
        """``payload``'s answer and the worker that gave it. A worker found dead (killed by
        another request, or dying as it started) is replaced and the payload goes to the next
        one: only the request a worker dies on gets that error."""
        gone = 0
        while True:
            worker = self._next_idle()
            with worker.use:
                if worker.closed:  # replaced already: the queue still held it
                    continue
                try:
                    if not worker.alive:
                        raise _Gone
                    answer = worker.request(payload, self._timeout_s)
                except _Gone:
                    self._replace(worker)
                    gone += 1
                    if gone > self._workers + _GONE_RETRIES:
                        raise GrammarError(
                            "the grammar compiler's worker processes keep dying as they start"
                        ) from None
                    continue
                except _Retired as retired:
                    self._replace(worker)
                    return retired.answer, worker
                except GrammarError:  # killed for its time limit, died on it, or never started
                    self._replace(worker)
                    raise
            self._idle.put(worker)
            return answer, worker

    def _next_idle(self) -> _Worker:
        """An idle worker, once every request that waited longer got one."""
        worker = None if self._closed else self._idle.get()
        if worker is None:  # its workers are gone: waiting for one would wait forever
            raise GrammarError("the grammar compiler has been shut down")
        return worker

    def _replace(self, worker: _Worker) -> None:
        """Take ``worker`` out of service (killed) and start another in its place, once."""
        with self._lock:
            known = worker in self._live
            self._live.discard(worker)
            closed = self._closed
        worker.close()
        # Starting a process takes seconds (the parent waits while the child imports): the
        # caller gets its answer now, the next compile waits for the new worker.
        if known and not closed:
            threading.Thread(target=self._start_worker, name="maskscope-respawn").start()

    def worker_pids(self) -> list[int]:
        """The process ids of the compile workers in service (started or starting)."""
        with self._lock:
            return sorted(pid for worker in self._live if (pid := worker.pid) is not None)

    def _start_worker(self) -> None:
        worker = _Worker(self._tokenizer_json, self._memory_mb, self._held_bytes)
        with self._lock:
            closed = self._closed
            if not closed:
                self._live.add(worker)
        if closed:
            worker.close()
        else:
            self._idle.put(worker)

    def _remember(self, key: str, result: CompileResult) -> None:
        cached = dataclasses.replace(result, cached=True)
        with self._lock:
            if key in self._cache or result.size_bytes > self._cache_bytes:
                return
            self._cache[key] = cached
            self._cache_size += result.size_bytes
            while self._cache_size > self._cache_bytes:
                _, evicted = self._cache.popitem(last=False)
                self._cache_size -= evicted.size_bytes

    def close(self) -> None:
        """Kill the worker processes, idle or busy: a compile in flight fails at once with
        ``GrammarTooComplex`` and none waits for a worker any more (a second call does
        nothing)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            workers = list(self._live)
            self._live.clear()
        self._idle.close()
        for worker in workers:
            worker.close()

    def __enter__(self) -> GrammarCompiler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
