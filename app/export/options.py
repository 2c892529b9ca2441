"""Which compile options each serving stack can reproduce, and how (request field or server flag).

A stack that calls xgrammar passes it only some options; the rest stay at xgrammar's defaults.
Each ``reach_*`` function takes the layout Maskscope compiled and returns the closest layout that
stack produces, with the server flags it takes. What still differs is not expressible there.
Rules read from vLLM 0.32.0 (``vllm/v1/structured_output/backend_xgrammar.py``,
``vllm/config/structured_outputs.py``) and SGLang 0.5.23
(``sglang/srt/constrained/xgrammar_backend.py``, ``base_grammar_backend.py``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from app.engine.grammars.spec import CompileOptions

__all__ = [
    "Layout",
    "Reach",
    "differences",
    "layout",
    "reach_openai",
    "reach_sglang",
    "reach_vllm",
]

VLLM_VERSION = "0.32.0"
SGLANG_VERSION = "0.5.23"
VLLM_FLAG = "--structured-outputs-config"


@dataclass(frozen=True)
class Layout:
    """The options as they shape xgrammar's grammar, defaults resolved.

    xgrammar 0.2.9 ignores ``indent`` under ``any_whitespace`` and then uses ``(",", ":")`` for
    separators; without it the separators default to ``(", ", ": ")``; with an indent, to a mix no
    pair of separators gives (None here). ``max_whitespace_cnt`` bounds the whitespace
    ``any_whitespace`` allows; without it, it only bounds a lookahead after strings, and is left
    out. (tests/export/test_options.py pins these rules on real xgrammar.)
    """

    any_whitespace: bool
    strict_mode: bool
    indent: int | None
    separators: tuple[str, str] | None
    max_whitespace_cnt: int | None


def default_separators(any_whitespace: bool, indent: int | None) -> tuple[str, str] | None:
    """xgrammar's separators when none are given (None: its own default under an indent)."""
    if any_whitespace:
        return (",", ":")
    return (", ", ": ") if indent is None else None


def layout(options: CompileOptions) -> Layout:
    """The layout ``options`` compile to."""
    aw = options.any_whitespace
    indent = None if aw else options.indent
    return Layout(
        any_whitespace=aw,
        strict_mode=options.strict_mode,
        indent=indent,
        separators=options.separators or default_separators(aw, indent),
        max_whitespace_cnt=options.max_whitespace_cnt if aw else None,
    )


@dataclass(frozen=True)
class Reach:
    """What a stack produces for a wanted layout.

    Attributes:
        layout: the layout the stack compiles with; None when it does not use xgrammar's layout
            at all (OpenAI decides its own).
        flags: server flags needed to get it (empty: the server's defaults do).
        why: for each option, why the stack cannot produce another value.
    """

    layout: Layout | None
    flags: tuple[str, ...] = ()
    why: dict[str, str] = dataclasses.field(default_factory=dict)


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, tuple):
        return "[" + ", ".join(repr(v) for v in value) + "]"
    return repr(value)


def differences(wanted: Layout, reach: Reach, stack: str) -> list[str]:
    """One sentence per option ``stack`` cannot set to the value Maskscope used."""
    out = []
    for name in (f.name for f in dataclasses.fields(Layout)):
        value = getattr(wanted, name)
        if reach.layout is None:
            if name in reach.why and value is not None:
                out.append(f"{name}={_show(value)}: {reach.why[name]}")
            continue
        got = getattr(reach.layout, name)
        if got != value:
            why = reach.why.get(name, reach.why.get("*", ""))
            out.append(f"{name}={_show(value)}; {stack} uses {_show(got)}: {why}")
    return out


_VLLM_WHY = {
    "*": "vLLM gives xgrammar the schema and any_whitespace (a server flag, which also sets the "
    "separators); nothing else, and no request field",
}


def reach_vllm(wanted: Layout) -> Reach:
    """vLLM: ``any_whitespace`` is a server flag (it then forces separators ``(",", ":")``)."""
    if wanted.any_whitespace:
        return Reach(Layout(True, True, None, (",", ":"), None), why=_VLLM_WHY)
    flags = (f"{VLLM_FLAG}.backend xgrammar", f"{VLLM_FLAG}.disable_any_whitespace true")
    return Reach(Layout(False, True, None, (",", ":"), None), flags, _VLLM_WHY)


_SGLANG_WHY = {
    "*": "SGLang gives xgrammar the schema, any_whitespace and max_whitespace_cnt (server "
    "flags); nothing else, and no request field",
}


def reach_sglang(wanted: Layout) -> Reach:
    """SGLang: ``any_whitespace`` and ``max_whitespace_cnt`` are server flags."""
    aw, count = wanted.any_whitespace, wanted.max_whitespace_cnt
    flags = [] if aw else ["--constrained-json-disable-any-whitespace"]
    if count is not None:
        flags.append(f"--constrained-json-max-whitespace-cnt {count}")
    got = Layout(aw, True, None, default_separators(aw, None), count)
    return Reach(got, tuple(flags), _SGLANG_WHY)


def reach_openai(wanted: Layout) -> Reach:
    """OpenAI strict mode: the schema, and nothing about layout."""
    layout_why = "OpenAI chooses the JSON layout itself; no request field sets it"
    why = dict.fromkeys(
        ("any_whitespace", "indent", "separators", "max_whitespace_cnt"), layout_why
    )
    why["strict_mode"] = (
        "OpenAI's strict mode allows no property the schema does not name, like strict_mode=true"
    )
    if wanted.strict_mode:
        why.pop("strict_mode")
    return Reach(None, why=why)
