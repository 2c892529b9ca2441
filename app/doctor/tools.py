"""The Doctor on a ``tools`` source: each tool's parameters examined as the tag built compiles them.

The builder's tag (``CompileResult.tools``) holds each tool's arguments as a ``json_schema`` leaf,
placed by the builder inside the tag that writes the tool's name. Each leaf is matched to its
tool, then:

- no tag, or a leaf of ``true`` (any JSON): every keyword of the tool's schema is ``ignored``, and
  the detail says why;
- a constrained leaf: its schema is examined as a schema is (keyword probe, witnesses, proofs),
  the witnesses replayed through a grammar that is exactly that leaf (compiled as a structural
  tag of that one format, so its style, ``any_order`` and whitespace are the tag's).

Pointers and lines are into the tools source (``/tools/N/function/parameters/...``). Each leaf
and the whole tag's search (for the costs) is a part of the examination, bounded by its counts,
with ``budget_ms`` its own safety stop (:mod:`app.doctor.safety`): more tools is more work, never
a smaller share of a time budget.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from app.doctor.backends import vllm as vllm_rules
from app.doctor.backends import xgrammar
from app.doctor.examination import Examination, Examiner
from app.doctor.keywords import constraint_keywords
from app.doctor.records import (
    BackendRow,
    Costs,
    DoctorReport,
    Enforcement,
    Finding,
    KeywordFinding,
    Message,
    Search,
    Status,
    Verdict,
    Witness,
)
from app.doctor.safety import LOAD_NOTE, Deadline
from app.doctor.source_lines import json_lines
from app.doctor.witnesses import search
from app.engine.grammars.spec import CompileOptions, CompileResult, GrammarKind, GrammarSpec
from app.engine.grammars.structural_tag import parse_tag
from app.engine.grammars.tools.base import ToolsBuild
from app.exceptions import CutShortByLoad
from app.paths import pointer_from_parts

__all__ = ["ToolLeaf", "examine_tag", "examine_tools", "tool_leaves"]

NO_TAG = "no tag"


@dataclass(frozen=True)
class ToolLeaf:
    """Where a tool's arguments are in the tag built.

    Attributes:
        index: the tool's position in the source's ``tools``.
        name: its function name.
        leaf: the ``json_schema`` format holding its arguments (None: the tag has none).
    """

    index: int
    name: str
    leaf: dict[str, Any] | None


Parts = tuple[str | int, ...]


def _walk(
    node: Any, context: tuple[str, ...], parts: Parts = ()
) -> Iterator[tuple[dict[str, Any], tuple[str, ...], Parts]]:
    """Every ``json_schema`` leaf in document order, with the literal texts around it (the
    enclosing tags' begins and the strings before it in a sequence), innermost first, and its
    place in the tag."""
    if isinstance(node, list):
        for index, item in enumerate(node):
            yield from _walk(item, context, (*parts, index))
        return
    if not isinstance(node, dict):
        return
    kind = node.get("type")
    if kind in ("json_schema", "qwen_xml_parameter"):
        yield node, context, parts
        return
    if kind == "tag":
        begin = node.get("begin")
        text = begin if isinstance(begin, str) else json.dumps(begin)
        yield from _walk(node.get("content"), (text, *context), (*parts, "content"))
        return
    if kind == "sequence":
        before: list[str] = []
        for index, element in enumerate(node.get("elements", [])):
            yield from _walk(element, (*reversed(before), *context), (*parts, "elements", index))
            if isinstance(element, dict) and element.get("type") == "const_string":
                before.append(str(element.get("value", "")))
        return
    for key, value in node.items():
        if key != "type":
            yield from _walk(value, context, (*parts, key))


def _named(names: Sequence[str], context: tuple[str, ...]) -> int | None:
    """The tool whose name the innermost text naming any tool names (the longest such name:
    ``get`` is in ``get_weather``)."""
    for text in context:
        hits = [i for i, name in enumerate(names) if name and name in text]
        if hits:
            return max(hits, key=lambda i: len(names[i]))
    return None


def tool_leaves(tag: dict[str, Any] | None, tools: Sequence[dict[str, Any]]) -> list[ToolLeaf]:
    """Each tool's arguments leaf in ``tag`` (a built ``{"type": "structural_tag", ...}``).

    A leaf goes to the tool its surrounding literals name (the builders write the name in the
    tag's ``begin``, or in a string before the arguments); failing that, to the one tool whose
    parameters it holds; failing that, by position when there are as many leaves as tools. A tool
    with several leaves (e.g. one branch per reasoning mode) gets its first constrained one.
    """
    names = [str(t.get("function", {}).get("name", "")) for t in tools]
    found: dict[int, dict[str, Any]] = {}
    walked = list(_walk(tag.get("format") if tag else None, ()))
    for position, (leaf, context, _) in enumerate(walked):
        index = _named(names, context)
        if index is None:
            schema = leaf.get("json_schema")
            same = [i for i, t in enumerate(tools) if t["function"].get("parameters") == schema]
            index = same[0] if len(same) == 1 else None
        if index is None and len(walked) == len(tools):
            index = position
        if index is None:
            continue
        if index not in found or found[index].get("json_schema") is True:
            found[index] = leaf
    return [ToolLeaf(i, name, found.get(i)) for i, name in enumerate(names)]


def _why_any(tool: dict[str, Any], builder: str) -> str:
    """Why a builder left a tool's arguments as any JSON."""
    function = tool.get("function", {})
    if function.get("parameters") is None:
        return "the tool has no parameters"
    if function.get("strict") is False:
        return 'not strict: the tool says "strict": false'
    if function.get("strict") is not True:
        return f'not strict: the tool does not say "strict": true ({builder} builder default)'
    return f"the {builder} builder's default"


def _ignored_rows(
    schema: Any, prefix: str, line_of: Callable[[str], int | None], detail: str
) -> list[KeywordFinding]:
    rows = []
    for keyword in constraint_keywords(schema):
        pointer = prefix + keyword.pointer
        rows.append(
            KeywordFinding(pointer, keyword.keyword, line_of(pointer), Status.IGNORED, detail)
        )
    return rows


def _leaf_options(leaf: dict[str, Any]) -> CompileOptions:
    """The options a leaf compiles with: xgrammar's tag leaves take any whitespace (up to the
    leaf's ``max_whitespace_cnt``) and refuse properties the schema does not declare."""
    return CompileOptions(
        any_whitespace=True, strict_mode=True, max_whitespace_cnt=leaf.get("max_whitespace_cnt")
    )


def _moved(pointer: str | None, prefix: str) -> str | None:
    return None if pointer is None else prefix + pointer


def _witness_moved(witness: Witness, prefix: str) -> Witness:
    errors = tuple(
        dataclasses.replace(e, pointer=_moved(e.pointer, prefix)) for e in witness.errors
    )
    return dataclasses.replace(witness, errors=errors)


def _finding_moved(finding: Finding, prefix: str, name: str) -> Finding:
    return dataclasses.replace(
        finding,
        cause=f"arguments of {name}: {finding.cause}",
        pointers=tuple(prefix + p for p in finding.pointers),
    )


@dataclass
class _Gathered:
    keywords: list[KeywordFinding] = dataclasses.field(default_factory=list)
    witnesses: list[Witness] = dataclasses.field(default_factory=list)
    findings: list[Finding] = dataclasses.field(default_factory=list)
    searches: list[Search] = dataclasses.field(default_factory=list)
    checked: list[Enforcement] = dataclasses.field(default_factory=list)
    free: list[Message] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)
    #: The whole tag's search (for the costs) was cut short by load.
    costs_by_load: bool = False

    def report(self, seed: int, backends: tuple[BackendRow, ...], costs: Costs) -> DoctorReport:
        """What was gathered over every leaf, as one report."""
        return DoctorReport(
            tuple(self.keywords),
            tuple(self.witnesses),
            _search(self.searches, seed, by_load=self.costs_by_load),
            _enforcement(self.checked),
            backends,
            costs,
            tuple(self.findings),
        )


def examine_tools(
    doctor: Examiner, grammar: CompileResult, *, seed: int, budget_ms: int, max_tokens: int | None
) -> DoctorReport:
    """Examine a compiled ``tools`` source: each tool's parameters as its tag compiles them.

    Args:
        doctor: the doctor (its compiles go through the engine: in a Doctor process, the server).
        grammar: the tools source compiled (its ``tools`` is the build).
        seed: the witness search's seed.
        budget_ms: the safety stop of each part (each leaf, the whole tag's search).
        max_tokens: a generation limit to compare with the shortest document of the whole tag.

    Raises:
        CutShortByLoad: the whole tag's walks were cut short and no leaf has a search record
            to say so in.
    """
    build = grammar.tools
    source = json.loads(grammar.spec.source)
    tools: list[dict[str, Any]] = list(source.get("tools", []))
    builder = str(source.get("builder", ""))
    tag = build.tag if build else None
    line_of = json_lines(grammar.spec.source)
    leaves = tool_leaves(tag, tools)
    out = _Gathered()
    for tool in leaves:
        schema = tools[tool.index].get("function", {}).get("parameters")
        prefix = pointer_from_parts(["tools", tool.index, "function", "parameters"])
        if tag is None:
            reason = build.reason if build and build.reason else "the builder builds none"
            detail = f"no tag: the call is not constrained ({reason})"
            out.keywords += _ignored_rows(schema, prefix, line_of, detail)
            out.free.append(Message(f"arguments of {tool.name}: {detail}", prefix))
        elif tool.leaf is None:
            out.free.append(Message(f"the tag built has no call of {tool.name}", prefix))
        elif tool.leaf.get("json_schema") is True:
            why = _why_any(tools[tool.index], builder)
            detail = f'the tag built leaves the arguments as any JSON ("json_schema": true; {why})'
            out.keywords += _ignored_rows(schema, prefix, line_of, detail)
            out.free.append(Message(f"arguments of {tool.name}: any JSON ({why})", prefix))
        else:
            _examine_leaf(doctor, tool, prefix, line_of, seed, budget_ms, out)
    costs = _whole_tag_costs(doctor, grammar, seed, budget_ms, max_tokens, out)
    backends = _backends(out, grammar.warnings, build, builder)
    return out.report(seed, backends, costs)


def examine_tag(
    doctor: Examiner, grammar: CompileResult, *, seed: int, budget_ms: int, max_tokens: int | None
) -> DoctorReport:
    """Examine a ``structural_tag`` source: each constrained ``json_schema`` leaf as for a tool,
    pointers into the tag (``/format/.../json_schema/...``). A legacy tag gets only its costs.

    Args:
        doctor: the doctor.
        grammar: the tag compiled.
        seed: the witness search's seed.
        budget_ms: the safety stop of each part (each leaf, the whole tag's search).
        max_tokens: a generation limit to compare with the shortest document of the whole tag.
    """
    tag = json.loads(grammar.spec.source)
    walked = list(_walk(tag.get("format"), (), ("format",))) if "format" in tag else []
    leaves = [
        (leaf, parts) for leaf, _, parts in walked if isinstance(leaf.get("json_schema"), dict)
    ]
    line_of = json_lines(grammar.spec.source)
    out = _Gathered()
    for leaf, parts in leaves:
        prefix = pointer_from_parts([*parts, "json_schema"])
        named = ToolLeaf(-1, f"the leaf at {pointer_from_parts(parts)}", leaf)
        _examine_leaf(doctor, named, prefix, line_of, seed, budget_ms, out)
    costs = _whole_tag_costs(doctor, grammar, seed, budget_ms, max_tokens, out)
    build = ToolsBuild(tag, None, None, {})
    backends = _backends(out, grammar.warnings, build, "structural_tag")
    return out.report(seed, backends, costs)


def _whole_tag_costs(
    doctor: Examiner,
    grammar: CompileResult,
    seed: int,
    budget_ms: int,
    max_tokens: int | None,
    out: _Gathered,
) -> Costs:
    deadline = Deadline.of_ms(budget_ms)
    found = search(
        grammar, doctor.tokens, doctor.vocab(), schema=None, seed=seed, deadline=deadline
    )
    if deadline.reached and not out.searches:  # no search record to say so in
        raise CutShortByLoad(f"the Doctor's walks of the whole tag (its costs) were {LOAD_NOTE}")
    out.costs_by_load = deadline.reached
    shortest = found.shortest
    return Costs(
        compile_ms=grammar.compile_ms,
        compile_ms_any_whitespace=None,
        size_bytes=grammar.size_bytes,
        shortest_document_tokens=shortest.tokens if shortest else None,
        shortest_document=shortest.text if shortest else None,
        unbounded_whitespace=found.unbounded_whitespace,
        max_tokens_below_shortest=(
            None if shortest is None or max_tokens is None else max_tokens < shortest.tokens
        ),
    )


def _examine_leaf(
    doctor: Examiner,
    tool: ToolLeaf,
    prefix: str,
    line_of: Callable[[str], int | None],
    seed: int,
    budget_ms: int,
    out: _Gathered,
) -> None:
    """One constrained leaf examined as a schema, its pointers moved into the tools source."""
    assert tool.leaf is not None
    leaf = tool.leaf
    schema = leaf.get("json_schema")
    if leaf.get("type") == "qwen_xml_parameter":  # the deprecated form of style qwen_xml
        leaf = {"type": "json_schema", "json_schema": schema, "style": "qwen_xml"}
    tag = {"type": "structural_tag", "format": leaf}
    compiled = doctor.compile(GrammarSpec(GrammarKind.STRUCTURAL_TAG, json.dumps(tag)))
    out.warnings += compiled.warnings
    if leaf.get("style", "json") != "json":
        # The witnesses are JSON documents; this leaf writes another syntax.
        detail = f"not examined: the tag writes these arguments in style {leaf['style']!r}"
        out.keywords += [
            dataclasses.replace(k, status=Status.UNCHECKED)
            for k in _ignored_rows(schema, prefix, line_of, detail)
        ]
        return
    spec = GrammarSpec(GrammarKind.JSON_SCHEMA, json.dumps(schema), _leaf_options(leaf))
    as_schema = dataclasses.replace(compiled, spec=spec)
    report = Examination(
        doctor, as_schema, None, line_of=lambda p: line_of(prefix + p), leaf=True
    ).run(seed, budget_ms, None)
    out.keywords += [dataclasses.replace(k, pointer=prefix + k.pointer) for k in report.keywords]
    out.witnesses += [_witness_moved(w, prefix) for w in report.witnesses]
    out.findings += [_finding_moved(f, prefix, tool.name) for f in report.findings]
    if report.search is not None:
        out.searches.append(report.search)
    if report.enforcement is not None:
        out.checked.append(report.enforcement)
    if leaf.get("any_order"):
        out.free.append(
            Message(
                f"arguments of {tool.name}: any_order: required keys may be missing and keys "
                "may repeat (the keyword probe compares the schema's own compile)",
                prefix,
            )
        )


def _search(searches: Sequence[Search], seed: int, *, by_load: bool) -> Search | None:
    if not searches:
        return None
    by_load = by_load or any(s.cut_short_by_load for s in searches)
    return Search(
        seed=seed,
        grammar_documents=sum(s.grammar_documents for s in searches),
        schema_documents=sum(s.schema_documents for s in searches),
        ms=sum(s.ms for s in searches),
        cut_short=by_load or any(s.cut_short for s in searches),
        unchecked_formats=tuple(dict.fromkeys(f for s in searches for f in s.unchecked_formats)),
        too_large=tuple(dict.fromkeys(t for s in searches for t in s.too_large)),
        cut_short_by_load=by_load,
    )


def _enforcement(checked: Sequence[Enforcement]) -> Enforcement | None:
    if not checked:
        return None
    return Enforcement(
        checked=sum(e.checked for e in checked),
        total=sum(e.total for e in checked),
        ms=sum(e.ms for e in checked),
        cut_short=any(e.cut_short for e in checked),
        cut_short_by_load=any(e.cut_short_by_load for e in checked),
    )


def _backends(
    out: _Gathered, warnings: Sequence[str], build: ToolsBuild | None, builder: str
) -> tuple[BackendRow, ...]:
    """The rows of the stacks, from the tag as built."""
    weaker = sum(w.direction.value == "grammar_accepts_schema_rejects" for w in out.witnesses)
    row = xgrammar.assess(
        out.keywords,
        tuple(dict.fromkeys((*warnings, *out.warnings))),
        strict_example=None,
        weaker=weaker,
        stricter=len(out.witnesses) - weaker,
    )
    ignored = [k for k in out.keywords if k.status in (Status.IGNORED, Status.WEAKENED)]
    if out.free:
        messages = tuple(m for m in row.messages if m.message != "ok")
        row = dataclasses.replace(row, verdict=Verdict.IGNORES, messages=(*out.free, *messages))
    return (row, _vllm_row(out, ignored, build, builder), _llguidance_row(build))


def _vllm_row(
    out: _Gathered, ignored: Sequence[KeywordFinding], build: ToolsBuild | None, builder: str
) -> BackendRow:
    version = vllm_rules.RULES_VERSION
    if build is None or build.tag is None:
        reason = build.reason if build and build.reason else "the builder builds none"
        who = "vLLM builds" if builder == "vllm" else "the builder builds"
        message = f"{who} no structural tag: the call is not constrained ({reason})"
        return BackendRow("vllm", version, Verdict.IGNORES, (Message(message),))
    rule = Message(
        "vLLM does not apply its unsupported-features check to structural tags "
        "(backend_xgrammar.py validate_xgrammar_grammar: only the nesting check and xgrammar's "
        "compile), so no keyword in the arguments refuses the request or sends it elsewhere"
    )
    if not ignored and not out.free:
        return BackendRow("vllm", version, Verdict.OK, (rule, Message("uses xgrammar")))
    silent = [
        Message(f"{k.keyword} {k.status.value}: dropped in silence", k.pointer) for k in ignored
    ]
    return BackendRow("vllm", version, Verdict.IGNORES, (rule, *out.free, *silent))


def _llguidance_row(build: ToolsBuild | None) -> BackendRow:
    import llguidance

    version = f"llguidance {llguidance.__version__} (vLLM 0.32.0's guidance backend)"
    if build is None or build.tag is None:
        return BackendRow(
            "llguidance", version, Verdict.OK, (Message(f"{NO_TAG}: nothing to mask"),)
        )
    if parse_tag(json.dumps(build.tag)).legacy:
        return BackendRow("llguidance", version, Verdict.OK, (Message("takes the legacy tag"),))
    message = (
        "llguidance cannot mask this structural tag: it takes only the legacy "
        '{"structures", "triggers"} form, as vLLM 0.32.0\'s guidance backend does; the tag '
        'built is in xgrammar\'s {"type": "structural_tag", "format": ...} form'
    )
    return BackendRow("llguidance", version, Verdict.REFUSES, (Message(message, "/format"),))
