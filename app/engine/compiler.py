"""Compile grammars in killable worker processes, with a cache that keeps their warnings."""

from __future__ import annotations

import dataclasses
import hashlib
import multiprocessing
import queue
import threading
import time
from collections import OrderedDict
from multiprocessing.connection import Connection
from typing import Any

import xgrammar as xgr

from app.engine import compile_worker
from app.engine.grammar import CompileResult, GrammarKind, GrammarSpec
from app.engine.keyword_probe import KeywordProbe, ProbeResult
from app.engine.structural_tag import TAG_NOT_CARRIED
from app.exceptions import GrammarError, GrammarTooComplex, InvalidInput, MaskscopeError
from app.settings import Settings

__all__ = ["GrammarCompiler"]

_STARTUP_TIMEOUT_S = 300.0
_POLL_S = 0.05


class _Worker:
    """One compile process (spawned: it must not inherit torch's threads) and its pipe."""

    def __init__(self, tokenizer_info_json: str) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(
            target=compile_worker.serve,
            args=(child, tokenizer_info_json),
            name="maskscope-compile",
            daemon=True,
        )
        self._process.start()
        child.close()
        self._ready = False
        self._closing = threading.Lock()
        self._closed = False

    def _receive(self, timeout: float) -> dict[str, Any] | None:
        """The next answer, or None after ``timeout``; EOFError as soon as the process dies."""
        conn: Connection = self._conn
        deadline = time.monotonic() + timeout
        while not conn.poll(min(_POLL_S, max(0.0, deadline - time.monotonic()))):
            if not self._process.is_alive() and not conn.poll():
                raise EOFError
            if time.monotonic() >= deadline:
                return None
        answer: dict[str, Any] = conn.recv()
        return answer

    def request(self, payload: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send one compile request; raise GrammarTooComplex on timeout or a crash."""
        try:
            if not self._ready:
                if self._receive(_STARTUP_TIMEOUT_S) is None:
                    raise GrammarError("the grammar compiler process did not start")
                self._ready = True
            self._conn.send(payload)
            answer = self._receive(timeout)
        except (EOFError, OSError):
            code = self._process.exitcode
            raise GrammarTooComplex(
                f"too complex: the compiler process died while compiling (exit code {code})"
            ) from None
        if answer is None:
            raise GrammarTooComplex(
                f"too complex: compiling took longer than the {timeout:g} s limit"
            )
        return answer

    @property
    def alive(self) -> bool:
        return self._process.is_alive()

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
    """

    def __init__(
        self,
        tokenizer_info: Any,
        *,
        workers: int = 2,
        timeout_s: float = 30.0,
        cache_bytes: int = 512 * 1024 * 1024,
    ) -> None:
        self._tokenizer_info = tokenizer_info
        self._tokenizer_json: str = tokenizer_info.serialize_json()
        self.tokenizer_key = hashlib.sha256(self._tokenizer_json.encode()).hexdigest()[:16]
        self._timeout_s = timeout_s
        self._cache_bytes = cache_bytes
        self._cache: OrderedDict[str, CompileResult] = OrderedDict()
        self._cache_size = 0
        self._lock = threading.Lock()
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._workers = workers
        self._closed = False
        self._live: set[_Worker] = set()  # every worker process, idle or busy
        for _ in range(workers):
            self._start_worker()

    @classmethod
    def from_settings(cls, tokenizer_info: Any, settings: Settings) -> GrammarCompiler:
        """A compiler for ``tokenizer_info`` with the settings' workers, time limit and cache."""
        return cls(
            tokenizer_info,
            workers=settings.compile_workers,
            timeout_s=settings.compile_timeout_s,
            cache_bytes=settings.compile_cache_bytes,
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
        answer = self._run(spec)
        if not answer["ok"]:
            raise MaskscopeError.from_dict(answer["error"])
        result = CompileResult(
            spec=spec,
            compiled=xgr.CompiledGrammar.deserialize_json(
                answer["serialized"], self._tokenizer_info
            ),
            grammar_text=answer["grammar_text"],
            rule_names=tuple(answer["rule_names"]),
            warnings=tuple(answer["warnings"]),
            compile_ms=float(answer["compile_ms"]),
            size_bytes=int(answer["size_bytes"]),
            not_carried=TAG_NOT_CARRIED if spec.kind is GrammarKind.STRUCTURAL_TAG else (),
        )
        self._remember(self._key(spec), result)
        return result

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

    def _run(self, spec: GrammarSpec) -> dict[str, Any]:
        payload = {
            "kind": spec.kind.value,
            "source": spec.source,
            "options": spec.options.to_dict(),
        }
        return self._send(payload)

    def _send(self, payload: dict[str, Any]) -> dict[str, Any]:
        while True:
            if self._closed:  # its workers are gone: waiting for one would wait forever
                raise GrammarError("the grammar compiler has been shut down")
            try:
                worker = self._idle.get(timeout=_POLL_S)
                break
            except queue.Empty:
                continue
        too_complex = False
        try:
            return worker.request(payload, self._timeout_s)
        except GrammarTooComplex:
            too_complex = True
            raise
        finally:
            if too_complex:
                worker.close()
                with self._lock:
                    self._live.discard(worker)
                # Starting a process takes seconds (the parent waits while the child imports):
                # the caller gets its answer now, the next compile waits for the new worker.
                if not self._closed:
                    threading.Thread(target=self._start_worker, name="maskscope-respawn").start()
            else:
                self._idle.put(worker)

    def _start_worker(self) -> None:
        worker = _Worker(self._tokenizer_json)
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
        for worker in workers:
            worker.close()

    def __enter__(self) -> GrammarCompiler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
