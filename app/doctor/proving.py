"""Each keyword proven enforced or not: documents built to break it, judged, then replayed.

For every constraint keyword, the subschema holding it is located in a document (the instance
path a validator reaches it by), values from :mod:`app.doctor.targeted` are put there in
documents the schema otherwise accepts, and each one the schema rejects *for that keyword* (the
validator's error points at it) is replayed token by token through the grammar, as replay does.
One the grammar accepts is the keyword's witness; if the grammar refuses all of them, the
keyword is enforced, proven. The other way (over-restriction), values the schema accepts but a
grammar may refuse are tried the same way: numbers equal in value written differently, values
of every JSON type where no ``type`` is written, enum objects written with other spacing. And a
raw control character inside each constrained string checks the grammar writes only JSON.

Everything is counted, nothing timed: the same schema and seed build the same documents, and
the same bounds (documents judged, tokens walked) stop them on any machine. The deadline
(:mod:`app.doctor.safety`) is only a safety stop for a machine too busy to do that work in time;
the proofs then say they were cut short by load.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import xgrammar as xgr

from app.doctor.instances import GiveUp, InstanceDrawer
from app.doctor.judge import Judge, WitnessError
from app.doctor.keywords import Keyword, resolve_ref
from app.doctor.records import Direction, Refusal, Witness
from app.doctor.safety import Deadline, Expired
from app.doctor.serialize import as_grammar_writes, in_schema_order, separators_of
from app.doctor.targeted import MISSING, TYPE_SAMPLES, breakers
from app.engine.grammars.spec import CompileResult
from app.engine.tokens import Tokens
from app.paths import pointer_from_parts, split_pointer

__all__ = ["WALKED_TOKENS", "Proof", "Proofs", "Prover", "Span"]

Span = tuple[int, int]
Path = list[str | int]
_BASES = 4
_TRIES_PER_KEYWORD = 24
#: Documents judged in all, at most (a fixed count: a big schema is examined in part, saying so).
_JUDGED = 6000
#: Tokens replayed through the grammar in all, at most (a fixed count too).
WALKED_TOKENS = 200_000
_SENTINEL = "\ue000maskscope\ue000"
_STRING_KEYWORDS = ("maxLength", "minLength", "pattern", "format")
_CONTROL = ("\u001a", "\n")
_SPLIT = ("allOf", "anyOf", "oneOf", "then", "else", "dependentSchemas")


@dataclass(frozen=True)
class Proof:
    """What the documents built against one keyword showed.

    Attributes:
        pointer: the keyword's pointer.
        witness: a built document the keyword rejects and the grammar accepts.
        span: where the value built against the keyword is in the witness (code points).
        refused: built documents the keyword rejects that the grammar refused.
        note: why no document breaking it can exist or be built (None when one was built).
        not_json: a document with a raw control character in a string this keyword
            constrains, which the grammar accepts (JSON forbids it).
        not_json_span: where that character is.
    """

    pointer: str
    witness: Witness | None = None
    span: Span | None = None
    refused: int = 0
    note: str | None = None
    not_json: str | None = None
    not_json_span: Span | None = None


@dataclass(frozen=True)
class Over:
    """A document the schema accepts and the grammar refuses, and why it was built.

    Attributes:
        cause: the class of document, in words.
        pointers: the keywords it concerns.
        witness: the refused document.
        span: the part built on purpose.
    """

    cause: str
    pointers: tuple[str, ...]
    witness: Witness
    span: Span | None


@dataclass(frozen=True)
class Proofs:
    """Every keyword's proof, the over-restrictions, the subschemas without ``type`` (pointer,
    types the schema accepts, types the grammar writes), whether a bound was reached, and
    whether that bound was the safety stop (``by_load``) rather than a count."""

    by_pointer: dict[str, Proof]
    over: tuple[Over, ...] = ()
    typeless: tuple[tuple[str, frozenset[str], frozenset[str]], ...] = ()
    cut_short: bool = False
    by_load: bool = False


def locations(root: Any) -> dict[str, Path]:
    """Subschema pointer -> the instance path a validator first applies it at."""
    out: dict[str, Path] = {}
    queue: deque[tuple[Path, Path, Any]] = deque([([], [], root)])
    while queue:
        parts, path, node = queue.popleft()
        pointer = pointer_from_parts(parts)
        if not isinstance(node, dict) or pointer in out:
            continue
        out[pointer] = path
        queue.extend(_located_children(root, node, parts, path))
    return out


def _located_children(
    root: Any, node: dict[str, Any], parts: Path, path: Path
) -> Iterator[tuple[Path, Path, Any]]:
    properties = node.get("properties")
    if isinstance(properties, dict):
        for name, child in properties.items():
            yield [*parts, "properties", name], [*path, name], child
    prefix = node.get("prefixItems")
    prefix = prefix if isinstance(prefix, list) else []
    for index, child in enumerate(prefix):
        yield [*parts, "prefixItems", index], [*path, index], child
    items = node.get("items")
    if isinstance(items, list):
        for index, child in enumerate(items):
            yield [*parts, "items", index], [*path, index], child
    elif isinstance(items, dict):
        yield [*parts, "items"], [*path, len(prefix)], items
    if isinstance(node.get("additionalProperties"), dict):
        yield [*parts, "additionalProperties"], [*path, "zz_extra"], node["additionalProperties"]
    if isinstance(node.get("contains"), dict):
        yield [*parts, "contains"], [*path, 0], node["contains"]
    for key in ("allOf", "anyOf", "oneOf"):
        if isinstance(node.get(key), list):
            for index, child in enumerate(node[key]):
                yield [*parts, key, index], path, child
    for key in ("then", "else"):
        if key in node:
            yield [*parts, key], path, node[key]
    if isinstance(node.get("dependentSchemas"), dict):
        for name, child in node["dependentSchemas"].items():
            yield [*parts, "dependentSchemas", name], path, child
    target = resolve_ref(root, node["$ref"]) if isinstance(node.get("$ref"), str) else None
    if target is not None:
        yield list(target[0]), path, target[1]


class _NoPlace(Exception):
    """The path cannot be made in this document (an index past the end)."""


def place(document: Any, path: Path, value: Any) -> Any:
    """``document`` with ``value`` at ``path`` (missing objects and arrays made on the way)."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(head, str):
        out = dict(document) if isinstance(document, dict) else {}
        out[head] = place(out.get(head, MISSING), rest, value)
        return out
    items = list(document) if isinstance(document, list) else []
    if head < len(items):
        items[head] = place(items[head], rest, value)
    elif head == len(items):
        items.append(place(MISSING, rest, value))
    else:
        raise _NoPlace
    return items


def value_at(document: Any, path: Path) -> Any:
    """The value at ``path``, or :data:`MISSING`."""
    for part in path:
        if isinstance(part, str) and isinstance(document, dict) and part in document:
            document = document[part]
        elif isinstance(part, int) and isinstance(document, list) and part < len(document):
            document = document[part]
        else:
            return MISSING
    return document


def _is_sample_type(value: Any, kind: str) -> bool:
    return type(value) is type(TYPE_SAMPLES[kind])


class Prover:
    """Builds and replays the documents for one schema and grammar.

    Args:
        grammar: the compiled grammar.
        tokens: the tokenizer it was compiled for.
        schema: the parsed JSON Schema.
        judge: its validator.
        seed: the seed of the documents the values are put in.
    """

    def __init__(
        self, grammar: CompileResult, tokens: Tokens, schema: Any, judge: Judge, *, seed: int
    ) -> None:
        self.grammar = grammar
        self.tokens = tokens
        self.schema = schema
        self.judge = judge
        self.options = grammar.spec.options
        self.located = locations(schema)
        self.bases = self._bases(seed)
        self._drawer = InstanceDrawer(schema, random.Random(f"{seed}/targeted"), extras=False)
        self.judged = 0
        self.walked = 0
        self.deadline = Deadline(float("inf"))

    def _bases(self, seed: int) -> list[Any]:
        """Documents the schema accepts, to put values in (MISSING last: a value alone)."""
        found: list[Any] = []
        for index in range(_BASES * 2):
            drawer = InstanceDrawer(
                self.schema, random.Random(f"{seed}/base/{index}"), extras=False
            )
            try:
                value = drawer.draw()
            except (GiveUp, RecursionError):
                continue
            if not self.judge.value(value) and value not in found:
                found.append(value)
            if len(found) >= _BASES:
                break
        return [*found, MISSING]

    def run(self, keywords: list[Keyword], deadline: Deadline) -> Proofs:
        """Prove every keyword, then the over-restrictions, within the counts (documents
        judged, tokens walked); ``deadline`` is only a safety stop, which sets ``cut_short``
        and ``by_load``."""
        self.deadline = deadline
        by_pointer: dict[str, Proof] = {}
        try:
            for keyword in keywords:
                if self._spent():
                    return self._cut(by_pointer)
                proof = self.prove(keyword)
                control = self.control_characters(keyword)
                if control is not None:
                    proof = dataclasses.replace(
                        proof, not_json=control[0], not_json_span=control[1]
                    )
                by_pointer[keyword.pointer] = proof
            if deadline.expired():
                return self._cut(by_pointer)
            over = tuple(self.over_restrictions(keywords))
            typeless = tuple(
                (pointer, frozenset(accepts), frozenset(writes))
                for pointer, accepts, writes in self.typeless_summary()
            )
        except Expired:
            return self._cut(by_pointer)
        return Proofs(by_pointer, over, typeless, self._spent(), deadline.reached)

    def _cut(self, by_pointer: dict[str, Proof]) -> Proofs:
        return Proofs(by_pointer, cut_short=True, by_load=self.deadline.reached)

    def _spent(self) -> bool:
        """A bound reached: the documents judged or the tokens walked at their cap (counts),
        or the safety stop passed."""
        return self.judged >= _JUDGED or self.walked >= WALKED_TOKENS or self.deadline.expired()

    def draw(self, node: Any) -> Any:
        """A value drawn for a subschema (None when none could be)."""
        try:
            return self._drawer.draw_from(node)
        except (GiveUp, RecursionError):
            return None

    def write(self, document: Any) -> str:
        """The document as the grammar writes it."""
        return as_grammar_writes(in_schema_order(document, self.schema), self.options)

    def span(self, base: Any, path: Path, text: str) -> Span:
        """Where the value put at ``path`` lies in ``text`` (written from ``base``)."""
        if not path:
            return (0, len(text))
        marked = self.write(place(base, path, _SENTINEL))
        mark = json.dumps(_SENTINEL, ensure_ascii=False)
        start = marked.find(mark)
        if start < 0:
            return (0, len(text))
        return (start, start + len(text) - len(marked) + len(mark))

    def walk(self, text: str) -> tuple[bool, int]:
        """``text`` tokenized as the model would and fed token by token, as replay does:
        whether the grammar accepts it whole (and may end there), and the code points taken
        before the first refused token. (Replay's own verdict also samples what the grammar
        expects at a refusal, a hundred times dearer: not needed here.)

        Raises:
            Expired: the safety stop passed during the walk.
        """
        matcher = xgr.GrammarMatcher(self.grammar.compiled)
        consumed = b""
        for token in self.tokens.encode(text):
            self.walked += 1
            self.deadline.check()
            if not matcher.accept_token(token):
                return False, len(consumed.decode("utf-8", errors="ignore"))
            consumed += self.tokens.output_bytes(token)
        return matcher.is_terminated() or matcher.is_completed(), len(text)

    def accepts(self, text: str) -> bool:
        """Whether the grammar accepts ``text`` whole, token by token as replay walks it."""
        return self.walk(text)[0]

    def _errors(self, document: Any) -> tuple[WitnessError, ...]:
        self.judged += 1
        return self.judge.value(document)

    def prove(self, keyword: Keyword) -> Proof:
        """Build documents against ``keyword`` and replay the ones it rejects."""
        node_pointer = pointer_from_parts(split_pointer(keyword.pointer)[:-1])
        path = self.located.get(node_pointer)
        if path is None:
            return Proof(keyword.pointer, note="where it applies in a document is not known")
        refused, tries, note, container = 0, 0, None, False
        for base in self.bases:
            current = value_at(base, path) if base is not MISSING else MISSING
            built = breakers(keyword.keyword, keyword.value, keyword.node, current, self.draw)
            container = built.container
            note = built.reason
            for value in built.values:
                self.deadline.check()  # a proof cut by load is no proof: none is kept
                if tries >= _TRIES_PER_KEYWORD or self._spent():
                    break
                tries += 1
                try:
                    document = place(base, path, value)
                except _NoPlace:
                    continue
                errors = self._errors(document)
                if not any(_under(e.pointer, keyword.pointer) for e in errors):
                    continue
                text = self.write(document)
                if self.accepts(text):
                    witness = Witness(Direction.GRAMMAR_ACCEPTS, text, errors)
                    return Proof(keyword.pointer, witness, self.span(base, path, text), refused)
                refused += 1
        if container:
            note = None
        elif not refused and note is None:
            note = "no document built breaks it alone"
        return Proof(keyword.pointer, refused=refused, note=None if refused else note)

    def control_characters(self, keyword: Keyword) -> tuple[str, Span] | None:
        """A document the grammar accepts with a raw control character in a string
        ``keyword`` constrains (JSON forbids them unescaped), and where the character is."""
        if keyword.keyword not in _STRING_KEYWORDS:
            return None
        node_pointer = pointer_from_parts(split_pointer(keyword.pointer)[:-1])
        path = self.located.get(node_pointer)
        if path is None:
            return None
        mark = json.dumps(_SENTINEL, ensure_ascii=False)
        for base in self.bases:
            try:
                marked = self.write(place(base, path, _SENTINEL))
            except _NoPlace:
                continue
            start = marked.find(mark)
            if start < 0:
                continue
            for char in _CONTROL:
                text = marked[:start] + '"' + char + '"' + marked[start + len(mark) :]
                if self.accepts(text):
                    return text, (start + 1, start + 2)
        return None

    def over_restrictions(self, keywords: list[Keyword]) -> list[Over]:
        """Documents the schema accepts that the grammar may refuse, tried one by one."""
        out: list[Over] = []
        for keyword in keywords:
            node_pointer = pointer_from_parts(split_pointer(keyword.pointer)[:-1])
            path = self.located.get(node_pointer)
            if path is None or self._spent():
                continue
            for cause, value in _equal_numbers(keyword):
                found = self._refused(path, value, cause, (keyword.pointer,))
                if found:
                    out.append(found)
                    break
            spaced = self._spacing(keyword, path)
            if spaced is not None:
                out.append(spaced)
        out += self._untyped()
        return out

    def _spacing(self, keyword: Keyword, path: Path) -> Over | None:
        """An ``enum``/``const`` object or array written with the spacing the grammar's options
        allow elsewhere (its separators; any, with ``any_whitespace``), which it refuses."""
        values = [keyword.value] if keyword.keyword == "const" else keyword.value
        if keyword.keyword not in ("enum", "const") or not isinstance(values, list):
            return None
        ways = [separators_of(self.options)]
        if self.options.any_whitespace:
            ways += [(",", ":"), (", ", ": ")]
        mark = json.dumps(_SENTINEL, ensure_ascii=False)
        for value in values:
            if not isinstance(value, dict | list) or not value:
                continue
            for base in self.bases:
                try:
                    document = place(base, path, value)
                    marked = self.write(place(base, path, _SENTINEL))
                except _NoPlace:
                    continue
                if self._errors(document) or (start := marked.find(mark)) < 0:
                    continue
                for way in dict.fromkeys(ways):
                    written = json.dumps(value, separators=way, ensure_ascii=False)
                    text = marked[:start] + written + marked[start + len(mark) :]
                    accepted, offset = self.walk(text)
                    if not accepted:
                        cause = (
                            f"an {keyword.keyword} value written with the separators"
                            f" {json.dumps(way[0])} and {json.dumps(way[1])}, as the options"
                            " write JSON elsewhere: the grammar takes it only as written in"
                            " the schema"
                        )
                        witness = Witness(Direction.SCHEMA_ACCEPTS, text, (), Refusal(offset, ()))
                        span = (start, start + len(written))
                        return Over(cause, (keyword.pointer,), witness, span)
                break
        return None

    def _refused(
        self, path: Path, value: Any, cause: str, pointers: tuple[str, ...]
    ) -> Over | None:
        for base in self.bases:
            try:
                document = place(base, path, value)
            except _NoPlace:
                continue
            if self._errors(document):
                continue
            text = self.write(document)
            refusal = _refusal_of(self, text)
            if refusal is not None:
                witness = Witness(Direction.SCHEMA_ACCEPTS, text, (), refusal)
                return Over(cause, pointers, witness, self.span(base, path, text))
            return None
        return None

    def _typeless(self) -> Iterator[tuple[str, Path]]:
        """The located subschemas that say nothing of their JSON type (no ``type``, ``const``,
        ``enum`` or ``$ref``, outside ``anyOf``-like splits), while the budget lasts."""
        for pointer, path in self.located.items():
            if self._spent():
                return
            node = _node_at(self.schema, pointer)
            if not isinstance(node, dict) or "type" in node or "const" in node or "enum" in node:
                continue
            if "$ref" in node or any(f"/{key}/" in pointer + "/" for key in _SPLIT):
                continue
            yield pointer, path

    def _untyped(self) -> list[Over]:
        """Where no ``type`` is written: values of each JSON type the schema accepts there
        and the grammar refuses."""
        out: list[Over] = []
        for pointer, path in self._typeless():
            for kind, sample in TYPE_SAMPLES.items():
                cause = (
                    f"no type at {pointer or 'the root'}: the schema accepts {kind} values there"
                )
                found = self._refused(path, sample, cause, (pointer,))
                if found is not None and _is_sample_type(sample, kind):
                    out.append(found)
        return out

    def typeless_summary(self) -> list[tuple[str, set[str], set[str]]]:
        """For each located subschema without ``type``: its pointer, the JSON types the schema
        accepts there, and the types the grammar can start writing there."""
        out = []
        for pointer, path in self._typeless():
            accepts, writes = set(), set()
            for kind, sample in TYPE_SAMPLES.items():
                for base in self.bases:
                    try:
                        document = place(base, path, sample)
                    except _NoPlace:
                        continue
                    text = self.write(document)
                    if not self._errors(document):
                        accepts.add(kind)
                    if self.accepts(text):
                        writes.add(kind)
                    break
            out.append((pointer, accepts, writes))
        return out


def _under(blamed: str | None, pointer: str) -> bool:
    """Whether an error blaming ``blamed`` breaks the keyword at ``pointer`` (itself, or a
    keyword of its subschemas: ``dependentSchemas``' ``required``)."""
    return blamed is not None and (blamed == pointer or blamed.startswith(pointer + "/"))


def _node_at(schema: Any, pointer: str) -> Any:
    target = resolve_ref(schema, "#" + pointer)
    return None if target is None else target[1]


def _refusal_of(prover: Prover, text: str) -> Refusal | None:
    accepted, offset = prover.walk(text)
    return None if accepted else Refusal(offset, ())


def _equal_numbers(keyword: Keyword) -> list[tuple[str, Any]]:
    """Values equal in number to the ones ``enum``, ``const`` or ``type: integer`` name, but
    written differently (``0`` as ``0.0``, ``1.0`` as ``1``)."""
    values: list[Any] = []
    if keyword.keyword == "const":
        values = [keyword.value]
    elif keyword.keyword == "enum" and isinstance(keyword.value, list):
        values = keyword.value
    elif keyword.keyword == "type" and "integer" in (
        [keyword.value] if isinstance(keyword.value, str) else keyword.value or []
    ):
        return [("an integer written with a fraction (1.0): the schema counts it an integer", 1.0)]
    out = []
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int | float) or abs(value) >= 1e15:
            continue
        other = float(value) if isinstance(value, int) else value
        if isinstance(value, float) and value.is_integer():
            other = int(value)
        if other is not value:
            out.append(
                (
                    f"a number equal to {json.dumps(value)} written {json.dumps(other)}: equal in"
                    f" value, so the schema accepts it",
                    other,
                )
            )
    return out
