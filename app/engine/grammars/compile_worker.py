"""The code that runs inside a compile worker process.

xgrammar prints warnings ("multipleOf is not supported for type:number; ignoring multipleOf") to
the C-level stderr, not as Python warnings. A worker serves one compile at a time and redirects
its own file descriptor 2 around it, so each compile gets exactly its own lines; a worker can also
be killed when a compile runs past its time limit, and its address space is capped. Every
exception a request raises is that request's answer (:func:`failed`): a worker never dies of
its input, and running out of memory (``std::bad_alloc`` included) retires it after answering.

A compile's answer carries what the compile answer shows (the grammar's text, rule names,
warnings, figures) and no compiled grammar: serialising it costs about 3x the compile, and
deserialising it 1.5x. The worker holds the compiled grammar (:class:`Held`) and serialises it
only when the server asks for it (``fetch``), when a session or replay needs its token masks.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import os
import queue
import re
import resource
import sys
import tempfile
import threading
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from typing import Any

from app.engine.grammars.keyword_probe import without_keyword
from app.engine.jsonpointer import line_column, locate
from app.exceptions import GrammarError, GrammarTooComplex
from app.jsontext import IntegerTooLong, json_type, loads
from app.paths import pointer_from_parts

__all__ = [
    "Held",
    "clean_message",
    "compile_request",
    "failed",
    "fetch_request",
    "located_error",
    "parse_schema",
    "probe_request",
    "rule_names",
    "serve",
    "subschemas",
]

# "[17:22:28] /project/cpp/json_schema_converter.cc:1094: Warning: multipleOf is not ..."
_LOG_PREFIX = re.compile(r"^\[\d{2}:\d{2}:\d{2}\] \S+?:\d+: (?:Warning: )?", re.MULTILINE)
_EBNF_POSITION = re.compile(r"EBNF (?:lexer|parser) error at line (\d+), column (\d+)")
_REGEX_POSITION = re.compile(r"Regex parsing error at position (\d+)")
_MAX_LOCATE_TRIES = 400
# "Check failed: (std::holds_alternative<Grammar>(result)) is false: Invalid structural tag ..."
_CHECK_FAILED = re.compile(r"^Check failed: \(.*?\) is false: ")
# "... syntax error at line 1 near: ... The JSON string is:{<the whole source>}"
_ECHOED = re.compile(r"\. The JSON string is:.*\Z", re.DOTALL)
_NEAR_CHARS = 60
_M_ARENA_MAX = -8
# What xgrammar (or Python) says when the address-space cap refuses it memory or a thread stack.
_EXHAUSTED = re.compile(r"bad_alloc|Resource temporarily unavailable|can't start new thread")
_ARENAS = 2
# What a worker was doing, by its request's op, for an error's message.
_DOING = {
    "compile": "compiling",
    "fetch": "serialising the compiled grammar (for its token masks)",
    "probe": "probing the schema's keywords",
}
# xgrammar refuses some schemas with an empty message (a bound of 1e400, a huge multipleOf).
_NO_REASON = "xgrammar refused this without saying why"
_XGRAMMAR_THREADS = 8  # GrammarCompiler's default max_threads


def clean_message(text: str) -> str:
    """Strip xgrammar's log prefix (time, C++ file and line) from each line of ``text``."""
    return _LOG_PREFIX.sub("", text).strip()


@contextlib.contextmanager
def _captured_stderr() -> Iterator[list[str]]:
    """Collect what is written to file descriptor 2 (C++ included) into the yielded list."""
    lines: list[str] = []
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield lines
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            text = sink.read().decode("utf-8", errors="replace")
            lines.extend(clean_message(line) for line in text.splitlines() if line.strip())


def parse_schema(source: str) -> Any:
    """Parse a JSON Schema source and check it: the meta-schema, then every reference.

    Raises:
        GrammarError: not JSON, nested too deeply, not a valid JSON Schema, or (as
            ``ReferenceRefused``) a reference that leaves the document, leads nowhere or loops
            in place; located by line, column and JSON pointer where possible.
    """
    schema = _loaded(source)
    check_meta(schema, source)
    _check_refs(schema, source)
    return schema


def _loaded(source: str) -> Any:
    try:
        schema = loads(source)
    except IntegerTooLong as exc:
        raise GrammarError(exc.msg, **exc.where()) from None
    except json.JSONDecodeError as exc:
        raise GrammarError(f"invalid JSON: {exc.msg}", line=exc.lineno, column=exc.colno) from None
    except RecursionError:
        raise GrammarError("invalid JSON Schema: nested too deeply to parse") from None
    if not isinstance(schema, dict | bool):
        raise GrammarError(
            f"a JSON Schema is an object or a boolean, not {json_type(schema)}",
            line=1,
            column=1,
        )
    return schema


def _check_refs(schema: Any, source: str) -> None:
    from app.engine.grammars.schema_refs import check_refs

    check_refs(schema, source=source)


def check_meta(schema: Any, source: str) -> None:
    """Check ``schema`` against its meta-schema.

    Raises:
        GrammarError: not a valid JSON Schema, located by line, column and JSON pointer.
    """
    import jsonschema

    from app.engine.grammars.jsonschema_safe import error_list, meta_validator
    from app.engine.grammars.meta_schema import known_valid

    if known_valid(schema):  # the common case, ~20x faster; jsonschema finds the message
        return
    error = jsonschema.exceptions.best_match(error_list(meta_validator(schema), schema))
    if error is not None:
        raise located_error(
            source, list(error.absolute_path), f"not a valid JSON Schema: {error.message}"
        )


def located_error(source: str, parts: list[str | int], message: str) -> GrammarError:
    pointer = pointer_from_parts(parts)
    line, column = locate(source, pointer) or (None, None)
    return GrammarError(message, pointer=pointer, line=line, column=column)


def subschemas(node: Any, parts: list[str | int]) -> Iterator[tuple[list[str | int], Any]]:
    if isinstance(node, dict):
        yield parts, node
        for key, value in node.items():
            yield from subschemas(value, [*parts, key])
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from subschemas(value, [*parts, index])


def _locate_schema_error(schema: Any, message: str, options: dict[str, Any]) -> list[str | int]:
    """The deepest subschema that fails alone with the same message: where the error is.

    xgrammar's schema errors name no location. A subschema converted on its own (no token masks
    are built, so this is cheap) that fails with the very same message holds the culprit.
    """
    import xgrammar as xgr

    candidates = sorted(subschemas(schema, []), key=lambda item: -len(item[0]))
    for parts, node in candidates[:_MAX_LOCATE_TRIES]:
        if not parts:
            continue
        try:
            with _captured_stderr():
                xgr.Grammar.from_json_schema(json.dumps(node), **_schema_kwargs(options))
        except RuntimeError as exc:
            if clean_message(str(exc)) == message:
                return parts
    return []


def _schema_kwargs(options: dict[str, Any]) -> dict[str, Any]:
    separators = options.get("separators")
    return {
        "any_whitespace": options["any_whitespace"],
        "strict_mode": options["strict_mode"],
        "indent": options.get("indent"),
        "separators": tuple(separators) if separators else None,
        "max_whitespace_cnt": options.get("max_whitespace_cnt"),
    }


def _compile(compiler: Any, kind: str, source: str, options: dict[str, Any]) -> Any:
    if kind == "structural_tag":
        return _compile_tag(compiler, source)
    try:
        if kind == "json_schema":
            return compiler.compile_json_schema(source, **_schema_kwargs(options))
        if kind == "ebnf":
            return compiler.compile_grammar(source)
        if kind == "regex":
            return compiler.compile_regex(source)
    except RuntimeError as exc:
        if _EXHAUSTED.search(str(exc)):
            raise MemoryError(str(exc)) from None
        raise _grammar_error(kind, source, options, clean_message(str(exc))) from None
    except UnicodeDecodeError as exc:
        # xgrammar's message quoted the source cut inside a character: it failed to decode and
        # took the worker down with it (then every compile waited for a new worker to start).
        message = bytes(exc.object).decode("utf-8", errors="replace")
        raise _grammar_error(kind, source, options, clean_message(message)) from None
    except UnicodeEncodeError as exc:  # xgrammar takes UTF-8: a lone surrogate has none
        raise _not_unicode(source, exc) from None
    raise GrammarError(f"unknown grammar kind {kind!r}")


def _not_unicode(source: str, exc: UnicodeEncodeError) -> GrammarError:
    """The error of a source holding a lone surrogate (``\\ud800`` sent as a character), at
    its line and column."""
    char = ord(exc.object[exc.start])
    message = f"the source holds U+{char:04X}, a lone surrogate that is not text (no UTF-8)"
    if exc.object != source:
        return GrammarError(message)
    line, column = line_column(source, exc.start)
    return GrammarError(message, line=line, column=column)


def _compile_tag(compiler: Any, source: str) -> Any:
    """Compile a structural tag; a failure is placed by compiling its leaves one by one."""
    from app.engine.grammars.structural_tag import parse_tag

    tag = parse_tag(source)
    try:
        return compiler.compile_structural_tag(tag.tag_json)
    except RuntimeError as exc:
        message = clean_message(str(exc))
    except UnicodeDecodeError as exc:
        message = clean_message(bytes(exc.object).decode("utf-8", errors="replace"))
    raise _tag_error(source, tag.leaves, _CHECK_FAILED.sub("", message)) from None


def _tag_error(source: str, leaves: Any, message: str) -> GrammarError:
    """The error of the first leaf that fails alone (inside it where the leaf says where), else
    xgrammar's message unplaced."""
    import xgrammar as xgr

    from app.engine.grammars.structural_tag import tag_error

    defaults = {"any_whitespace": True, "strict_mode": True}
    for leaf in leaves:
        try:
            with _captured_stderr():
                if leaf.kind == "json_schema":
                    xgr.Grammar.from_json_schema(json.dumps(leaf.value), **_schema_kwargs(defaults))
                elif leaf.kind == "regex":
                    xgr.Grammar.from_regex(leaf.value)
                elif leaf.syntax == "lark":
                    continue  # its special tokens need the tokenizer: the whole tag's error stands
                else:
                    xgr.Grammar.from_ebnf(leaf.value)
        except (RuntimeError, UnicodeDecodeError, TypeError) as exc:
            own = clean_message(str(exc))
            inner: list[str | int] = []
            if leaf.kind == "json_schema" and leaf.inside:
                inner = _locate_schema_error(leaf.value, own, defaults)
            error = tag_error(source, [*leaf.parts, *inner], f"{leaf.kind} leaf: {own}")
            if leaf.kind == "regex" and (match := _REGEX_POSITION.search(own)):
                _to_character(error, source, leaf.value, int(match[1]))
            return error
    return GrammarError(message)


def _to_character(error: GrammarError, source: str, pattern: str, position: int) -> None:
    """Move the error's column from the pattern's opening quote to the character at the
    1-based ``position`` of the pattern, when the source writes it without escapes (a column
    counted through escapes would be wrong)."""
    if error.line is None or error.column is None:
        return
    line = source.splitlines()[error.line - 1]
    written = json.dumps(pattern, ensure_ascii=False)
    if line[error.column - 1 :].startswith(written) and "\\" not in written:
        error.column += min(position, len(pattern))


def _grammar_error(kind: str, source: str, options: dict[str, Any], message: str) -> GrammarError:
    if kind == "ebnf" and (match := _EBNF_POSITION.search(message)):
        return GrammarError(message, line=int(match[1]), column=int(match[2]))
    if kind == "regex" and (match := _REGEX_POSITION.search(message)):
        line, column = line_column(source, max(0, min(len(source), int(match[1]) - 1)))
        return GrammarError(message, line=line, column=column)
    if kind == "json_schema":
        parts = _locate_schema_error(loads(source), message, options)
        if parts:
            return located_error(source, parts, _shown(message))
    return GrammarError(_shown(message))


def _shown(message: str) -> str:
    """xgrammar's message without its C++ check's text or the copy of the whole source, and
    the rest of the source it quotes ("near: ...") cut short."""
    shown = _ECHOED.sub(".", _CHECK_FAILED.sub("", message))
    head, near, rest = shown.partition(" near: ")
    if len(rest) > _NEAR_CHARS:
        shown = f"{head}{near}{rest[:_NEAR_CHARS]}…"
    return shown or _NO_REASON


def rule_names(grammar_text: str) -> list[str]:
    """Rule names by rule id, read from xgrammar's printed grammar: one ``name ::= ...`` line
    per rule, in id order (serialising the grammar to JSON for them cost more than the
    compile)."""
    return [line.split(" ::= ", 1)[0] for line in grammar_text.splitlines() if " ::= " in line]


class Held:
    """The compiled grammars a worker keeps until the server fetches them, least recently
    compiled first out past ``budget_bytes`` (a grammar no longer held is compiled again)."""

    def __init__(self, budget_bytes: int) -> None:
        self._budget = budget_bytes
        self._grammars: OrderedDict[str, Any] = OrderedDict()
        self._size = 0

    def put(self, key: str, compiled: Any) -> bool:
        """Keep ``compiled`` under ``key``; False when it alone is over the budget."""
        size = int(compiled.memory_size_bytes)
        if size > self._budget:
            return False
        if key in self._grammars:
            self._size -= int(self._grammars.pop(key).memory_size_bytes)
        self._grammars[key] = compiled
        self._size += size
        while self._size > self._budget:
            _, evicted = self._grammars.popitem(last=False)
            self._size -= int(evicted.memory_size_bytes)
        return True

    def get(self, key: str) -> Any | None:
        return self._grammars.get(key)


class _CompileThread:
    """The one thread a worker compiles in, started before the memory cap: its stack is mapped
    once and for all (in the serving thread, a compile under the cap ran on to the time limit),
    and a compile no longer pays a thread's start (about 0.1-0.3 ms)."""

    def __init__(self) -> None:
        self._calls: queue.SimpleQueue[Callable[[], Any]] = queue.SimpleQueue()
        self._outcomes: queue.SimpleQueue[tuple[Any, BaseException | None, float]] = (
            queue.SimpleQueue()
        )
        threading.Thread(target=self._serve, name="maskscope-compile-one", daemon=True).start()

    def _serve(self) -> None:
        while True:
            call = self._calls.get()
            start = time.perf_counter()
            try:
                outcome: tuple[Any, BaseException | None] = (call(), None)
            except BaseException as exc:  # raised again in the serving thread
                outcome = (None, exc)
            self._outcomes.put((*outcome, (time.perf_counter() - start) * 1000))

    def run(self, call: Callable[[], Any]) -> tuple[Any, BaseException | None, float]:
        """``call``'s result (or None), its error (or None) and its milliseconds."""
        self._calls.put(call)
        return self._outcomes.get()


@functools.cache
def _compile_thread() -> _CompileThread:
    return _CompileThread()


def compile_threads(cores: int) -> int:
    """xgrammar's threads for one compile: its default (8), but never more than ``cores``.

    Past the cores they only take turns, and in a worker they also share its few malloc arenas
    (:func:`cap_memory`): on 2 cores a worker's compile took 13.3 ms p50 with 8 threads against
    10.7 ms with 2 (bench/compile.py's 60 schemas).
    """
    return max(1, min(_XGRAMMAR_THREADS, cores))


def _compile_checked(
    compiler: Any, kind: str, source: str, options: dict[str, Any]
) -> tuple[Any, list[str], float]:
    """Check a JSON Schema (its references, then its meta-schema), then compile: an invalid
    schema never reaches xgrammar, so its error is the check's.

    The meta-schema check is :func:`check_meta`'s fast path for a valid schema (a fraction of a
    millisecond), so it runs before the compile rather than beside it: on a machine whose cores
    xgrammar's own threads fill, a check beside the compile only took time from it.

    Returns:
        the compiled grammar, what xgrammar printed, and the compile's milliseconds.

    Raises:
        GrammarError: the schema is invalid, or the compile failed.
    """
    if kind == "json_schema":
        schema = _loaded(source)
        _check_refs(schema, source)  # first: a reference loop could hang the compile
        check_meta(schema, source)
    with _captured_stderr() as printed:
        compiled, error, compile_ms = _compile_thread().run(
            lambda: _compile(compiler, kind, source, options)
        )
    if error is not None:
        raise error
    return compiled, printed, compile_ms


def compile_request(
    compiler: Any, request: dict[str, Any], held: Held | None = None
) -> dict[str, Any]:
    """Compile one grammar request; never raises, the answer says ``ok`` or carries the error.

    Args:
        compiler: an ``xgrammar.GrammarCompiler`` with its cache disabled (the parent caches).
        request: ``{"kind", "source", "options"}`` as in
        :class:`app.engine.grammars.spec.GrammarSpec`,
            and ``"key"`` when ``held`` is given.
        held: where the worker keeps the compiled grammar for a later :func:`fetch_request`;
            the answer then says ``held`` instead of carrying ``serialized``. None (or a grammar
            over its budget): the answer carries the serialised compiled grammar.
    """
    kind, source, options = request["kind"], request["source"], request["options"]
    try:
        compiled, printed, compile_ms = _compile_checked(compiler, kind, source, options)
    except GrammarError as exc:
        return {"ok": False, "error": exc.to_dict()}
    text = str(compiled.grammar)
    answer = {
        "ok": True,
        "grammar_text": text,
        "rule_names": rule_names(text),
        "warnings": printed,
        "compile_ms": compile_ms,
        "size_bytes": int(compiled.memory_size_bytes),
        "held": False,
    }
    key = request.get("key")
    if held is not None and key is not None and held.put(key, compiled):
        answer["held"] = True
    else:
        answer["serialized"] = compiled.serialize_json()
    return answer


def fetch_request(held: Held, request: dict[str, Any]) -> dict[str, Any]:
    """The serialised compiled grammar held under ``request["key"]``, or ``missing``.

    Args:
        held: the worker's held grammars.
        request: ``{"op": "fetch", "key"}``.
    """
    compiled = held.get(request["key"])
    if compiled is None:
        return {"ok": True, "missing": True}
    return {"ok": True, "serialized": compiled.serialize_json()}


def _converted(schema: Any, options: dict[str, Any]) -> tuple[str | None, list[str]]:
    """The grammar text of ``schema`` (None when xgrammar refuses it) and what was printed."""
    import xgrammar as xgr

    with _captured_stderr() as printed:
        try:
            text: str | None = str(
                xgr.Grammar.from_json_schema(json.dumps(schema), **_schema_kwargs(options))
            )
        except RuntimeError:
            text = None
    return text, printed


def probe_request(request: dict[str, Any]) -> dict[str, Any]:
    """Convert the schema once whole, then once without each keyword, until the time bound.

    Args:
        request: ``{"op": "probe", "source", "options", "pointers": [str], "budget_s"}``.
    """
    start = time.perf_counter()
    schema = loads(request["source"])
    base, warnings = _converted(schema, request["options"])
    probes: list[dict[str, Any]] = []
    cut_short = False
    for pointer in request["pointers"]:
        if time.perf_counter() - start > request["budget_s"]:
            cut_short = True
            break
        try:
            variant = without_keyword(schema, pointer)
        except (KeyError, IndexError, ValueError):
            continue
        text, printed = _converted(variant, request["options"])
        gone = [line for line in warnings if line not in printed]
        probes.append({"pointer": pointer, "identical": text == base, "warnings": gone})
    return {
        "ok": True,
        "probes": probes,
        "warnings": warnings,
        "cut_short": cut_short,
        "ms": (time.perf_counter() - start) * 1000,
    }


def _address_space_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def cap_memory(memory_mb: int) -> None:
    """Cap the address space at what is mapped now plus ``memory_mb`` (few malloc arenas, so
    that xgrammar's threads do not each reserve 64 MB of it): a compile past it fails, or kills
    this process, never the server."""
    try:
        ctypes.CDLL("libc.so.6").mallopt(_M_ARENA_MAX, _ARENAS)
    except (OSError, AttributeError):  # not glibc
        pass
    limit = _address_space_bytes() + memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _warm() -> None:
    """Import and build what checks a schema (both paths of :func:`check_meta`) before the cap."""
    from app.engine.grammars.meta_schema import warm

    warm()
    with contextlib.suppress(GrammarError):
        check_meta({"type": 0}, '{"type": 0}')


def serve(
    conn: Connection, tokenizer_info_json: str, memory_mb: int = 0, held_bytes: int = 0
) -> None:
    """Worker process entry point: answer compile requests until the pipe closes.

    Args:
        conn: the pipe to the server.
        tokenizer_info_json: the serialised ``xgrammar.TokenizerInfo``.
        memory_mb: memory the process may map beyond what it holds once loaded (0: no cap).
        held_bytes: budget of the compiled grammars held for the server to fetch.
    """
    import xgrammar as xgr

    tokenizer_info = xgr.TokenizerInfo.deserialize_json(tokenizer_info_json)
    compiler = xgr.GrammarCompiler(
        tokenizer_info,
        max_threads=compile_threads(len(os.sched_getaffinity(0))),
        cache_enabled=False,
    )
    held = Held(held_bytes)
    handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
        "probe": probe_request,
        "fetch": lambda request: fetch_request(held, request),
    }
    _warm()
    _compile_thread()
    if memory_mb:
        cap_memory(memory_mb)
    conn.send({"ready": True})
    while True:
        try:
            request = conn.recv()
        except (EOFError, KeyboardInterrupt):
            return
        if request is None:
            return
        handler = handlers.get(request.get("op", ""))
        try:
            answer = handler(request) if handler else compile_request(compiler, request, held)
        except Exception as exc:  # every failure is an answer: the worker serves on
            answer = failed(exc, request.get("op", "compile"), memory_mb)
        if not _sent(conn, answer, request.get("op", "compile"), memory_mb):
            return


def failed(exc: Exception, op: str, memory_mb: int) -> dict[str, Any]:
    """The answer to a request that raised ``exc``, never a Python internal: out of memory
    (``MemoryError``, or xgrammar's ``std::bad_alloc``) retires the worker, whose heap is
    suspect now; any other error is the request's 422 and the worker serves on.

    Args:
        exc: what the request raised.
        op: the request's ``op`` (``compile``, ``fetch``, ``probe``).
        memory_mb: the worker's memory cap, named in the answer.
    """
    doing = _DOING.get(op, "compiling")
    # xgrammar's own error only: a GrammarError's message may quote the user's source
    if isinstance(exc, MemoryError) or (
        isinstance(exc, RuntimeError) and _EXHAUSTED.search(str(exc))
    ):
        error: GrammarError = GrammarTooComplex(
            f"too complex: {doing} needed more memory than a compile may use ({memory_mb} MB)"
        )
        return {"ok": False, "retire": True, "error": error.to_dict()}
    if isinstance(exc, GrammarError):
        error = exc
    elif isinstance(exc, IntegerTooLong):
        error = GrammarError(exc.msg, **exc.where())
    elif isinstance(exc, json.JSONDecodeError):
        error = GrammarError(f"invalid JSON: {exc.msg}", line=exc.lineno, column=exc.colno)
    elif isinstance(exc, RecursionError):
        error = GrammarError(f"{doing} failed: the grammar is nested too deeply")
    else:  # a bug of ours or of xgrammar's: the operator gets the traceback, the user a cause
        traceback.print_exc()
        error = GrammarError(f"{doing} failed: {_cause(exc)}")
    return {"ok": False, "error": error.to_dict()}


def _cause(exc: Exception) -> str:
    """xgrammar's own message (its log prefix stripped), or what the error was about."""
    if isinstance(exc, RuntimeError) and (message := clean_message(str(exc))):
        return _CHECK_FAILED.sub("", message.splitlines()[0])
    if isinstance(exc, UnicodeError):
        return "it holds text that is not valid Unicode"
    if isinstance(exc, ArithmeticError):
        return "a number in it is out of range"
    return "an unexpected error (the server's log has it)"


def _sent(conn: Connection, answer: dict[str, Any], op: str, memory_mb: int) -> bool:
    """Send ``answer``; False when the worker must stop (it retires, or the pipe is gone).

    An answer too large to pickle under the memory cap (a big serialised grammar) is answered
    as out of memory instead: nothing of it was written yet, pickling comes first.
    """
    try:
        conn.send(answer)
    except MemoryError as exc:
        answer = failed(exc, op, memory_mb)
        try:
            conn.send(answer)
        except (MemoryError, OSError):
            return False
    except OSError:
        return False
    return not answer.get("retire")
