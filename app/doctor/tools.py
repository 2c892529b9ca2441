"""The Doctor on a ``tools`` source: each tool's parameters examined as the tag built compiles them.

The builder's tag (``CompileResult.tools``) writes each tool's call, and its arguments inside it
either as one part (a ``json_schema`` leaf, or raw text) or one part per parameter (the
parameter's name, then its value: a ``json_schema`` leaf, or raw text), whichever the release
builds; :mod:`app.doctor.tool_leaves` reads which from the tag's structure. Then:

- no tag, arguments left as any JSON (a leaf of ``true``) or as raw text: every keyword of the
  tool's schema (or of the parameter's) is ``ignored``, and the detail says why;
- a constrained leaf: its schema is examined as a schema is (keyword probe, witnesses, proofs),
  the witnesses replayed through a grammar that is exactly that leaf (compiled as a structural
  tag of that one format, so its style, ``any_order`` and whitespace are the tag's); a
  parameter's keywords its leaf leaves out are ``ignored``;
- parameters written apart inside a repeat or a choice: the object's ``required`` (and the other
  presence keywords) are ``ignored``, as a call may leave a parameter out or write it again.

Pointers and lines are into the tools source (``/tools/N/function/parameters/...``). Each leaf
and the whole tag's search (for the costs) is a part of the examination, bounded by its counts,
with ``budget_ms`` its own safety stop (:mod:`app.doctor.safety`): more tools is more work, never
a smaller share of a time budget.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
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
from app.doctor.tool_leaves import FREE_KINDS, ParameterValue, ToolLeaf, json_leaves, tool_leaves
from app.doctor.witnesses import search
from app.engine.grammars.spec import CompileOptions, CompileResult, GrammarKind, GrammarSpec
from app.engine.grammars.structural_tag import parse_tag
from app.engine.grammars.tools.base import ToolsBuild
from app.exceptions import CutShortByLoad
from app.paths import escape_token, pointer_from_parts

__all__ = ["ToolLeaf", "examine_tag", "examine_tools", "tool_leaves"]

NO_TAG = "no tag"


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
        elif not tool.called:
            out.free.append(Message(f"the tag built has no call of {tool.name}", prefix))
        elif tool.leaf is not None and tool.leaf.get("json_schema") is not True:
            _examine_leaf(doctor, tool.leaf, tool.name, prefix, line_of, seed, budget_ms, out)
        elif tool.parameters:
            _examine_parameters(doctor, tool, schema, prefix, line_of, seed, budget_ms, out)
        elif tool.leaf is not None:
            why = _why_any(tools[tool.index], builder)
            detail = f'the tag built leaves the arguments as any JSON ("json_schema": true; {why})'
            out.keywords += _ignored_rows(schema, prefix, line_of, detail)
            out.free.append(Message(f"arguments of {tool.name}: any JSON ({why})", prefix))
        elif tool.free is not None:
            detail = f"the tag built takes the arguments as raw text ({tool.free['type']})"
            out.keywords += _ignored_rows(schema, prefix, line_of, detail)
            said = f"raw text, not constrained ({tool.free['type']})"
            out.free.append(Message(f"arguments of {tool.name}: {said}", prefix))
        elif isinstance(schema, dict) and schema.get("properties"):
            message = f"the tag built writes a call of {tool.name} with no arguments"
            out.free.append(Message(message, prefix))
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
    walked = list(json_leaves(tag.get("format"), ("format",))) if "format" in tag else []
    leaves = [(leaf, parts) for leaf, parts in walked if isinstance(leaf.get("json_schema"), dict)]
    line_of = json_lines(grammar.spec.source)
    out = _Gathered()
    for leaf, parts in leaves:
        prefix = pointer_from_parts([*parts, "json_schema"])
        name = f"the leaf at {pointer_from_parts(parts)}"
        _examine_leaf(doctor, leaf, name, prefix, line_of, seed, budget_ms, out)
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
    leaf: dict[str, Any],
    name: str,
    prefix: str,
    line_of: Callable[[str], int | None],
    seed: int,
    budget_ms: int,
    out: _Gathered,
) -> None:
    """One constrained leaf (a tool's arguments, or one parameter's value) examined as a schema,
    its pointers moved to ``prefix`` in the tools source."""
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
    out.findings += [_finding_moved(f, prefix, name) for f in report.findings]
    if report.search is not None:
        out.searches.append(report.search)
    if report.enforcement is not None:
        out.checked.append(report.enforcement)
    if leaf.get("any_order"):
        out.free.append(
            Message(
                f"arguments of {name}: any_order: required keys may be missing and keys "
                "may repeat (the keyword probe compares the schema's own compile)",
                prefix,
            )
        )


#: The object's keywords a call that may leave a parameter out, or write it again, ignores.
_PRESENCE = ("required", "minProperties", "maxProperties", "dependentRequired", "dependencies")


def _examine_parameters(
    doctor: Examiner,
    tool: ToolLeaf,
    schema: Any,
    prefix: str,
    line_of: Callable[[str], int | None],
    seed: int,
    budget_ms: int,
    out: _Gathered,
) -> None:
    """A tool whose tag writes each parameter apart: each value as the tag writes it (a JSON
    leaf examined, raw text ignoring every keyword of the parameter), and the object's presence
    keywords ignored where a parameter may be left out or repeated."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    values: dict[str, ParameterValue] = {}
    for value in tool.parameters:  # a constrained leaf, where a parameter has several values
        kept = values.get(value.name)
        if kept is None or not isinstance(kept.value.get("json_schema"), dict):
            values[value.name] = value
    for name, declared in (properties or {}).items():
        where = f"{prefix}/properties/{escape_token(name)}"
        node = values[name].value if name in values else None
        if node is None:
            message = f"the tag built writes no parameter {name} of {tool.name}"
            out.free.append(Message(message, where))
        elif node.get("type") in FREE_KINDS or node.get("json_schema") is True:
            what = "any JSON" if node.get("json_schema") is True else "raw text"
            detail = f"the tag built takes the value of {name} as {what} ({node['type']})"
            out.keywords += _ignored_rows(declared, where, line_of, detail)
            said = (
                "any JSON" if what == "any JSON" else f"raw text, not constrained ({node['type']})"
            )
            out.free.append(Message(f"arguments of {tool.name}: {name}: {said}", where))
        else:
            compiled = node.get("json_schema")
            kept_pointers = {k.pointer for k in constraint_keywords(compiled)}
            detail = f"the tag built compiles {name} as {json.dumps(compiled)}, without it"
            out.keywords += [
                k
                for k in _ignored_rows(declared, where, line_of, detail)
                if k.pointer[len(where) :] not in kept_pointers
            ]
            leaf_name = f"{tool.name} ({name})"
            _examine_leaf(doctor, node, leaf_name, where, line_of, seed, budget_ms, out)
    if any(value.loose for value in tool.parameters):
        detail = (
            "the tag writes each parameter apart, in any order and any number of times: a call "
            "may leave a parameter out or write it again"
        )
        rows = _ignored_rows(schema, prefix, line_of, detail)
        out.keywords += [k for k in rows if k.pointer[len(prefix) :] in _own(_PRESENCE)]
        message = f"arguments of {tool.name}: each parameter may be left out or written again"
        out.free.append(Message(message, prefix))


def _own(keywords: Sequence[str]) -> set[str]:
    """The pointers of the root object's own ``keywords``."""
    return {f"/{keyword}" for keyword in keywords}


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
