"""Which options a stack can reproduce; the layout rules pinned against real xgrammar."""

from __future__ import annotations

import itertools
import json

import xgrammar as xgr

from app.engine.grammars.spec import CompileOptions
from app.export.options import (
    differences,
    layout,
    reach_openai,
    reach_sglang,
    reach_vllm,
)

# Objects, arrays and strings: every place a separator or whitespace can go.
SCHEMA = json.dumps(
    {
        "type": "object",
        "properties": {
            "a": {"type": "string"},
            "b": {"type": "array", "items": {"type": "integer"}},
        },
        "required": ["a", "b"],
    }
)

OPTIONS = [
    CompileOptions(
        any_whitespace=aw,
        strict_mode=strict,
        indent=indent,
        separators=sep,
        max_whitespace_cnt=count,
    )
    for aw, strict, indent, sep, count in itertools.product(
        (False, True),
        (True, False),
        (None, 2),
        (None, (", ", ": "), (",", ":"), (",", ": ")),
        (None, 3),
    )
]


def _grammar(options: CompileOptions) -> str:
    return str(
        xgr.Grammar.from_json_schema(
            SCHEMA,
            any_whitespace=options.any_whitespace,
            strict_mode=options.strict_mode,
            indent=options.indent,
            separators=options.separators,
            max_whitespace_cnt=options.max_whitespace_cnt,
        )
    )


def test_options_with_the_same_layout_compile_to_the_same_grammar() -> None:
    by_layout: dict[object, str] = {}
    for options in OPTIONS:
        grammar = _grammar(options)
        key = layout(options)
        if not options.any_whitespace and options.max_whitespace_cnt is not None:
            continue  # it only bounds a lookahead after strings: left out of the layout on purpose
        assert by_layout.setdefault(key, grammar) == grammar, options


def test_options_with_different_layouts_compile_to_different_grammars() -> None:
    seen: dict[str, object] = {}
    for options in OPTIONS:
        key = layout(options)
        assert seen.setdefault(_grammar(options), key) == key, options


def test_vllm_needs_two_server_flags_for_compact_json_and_then_uses_its_own_separators() -> None:
    wanted = layout(CompileOptions())  # Maskscope's default: compact, ", " and ": "
    reach = reach_vllm(wanted)
    assert reach.flags == (
        "--structured-outputs-config.backend xgrammar",
        "--structured-outputs-config.disable_any_whitespace true",
    )
    (line,) = differences(wanted, reach, "vLLM 0.32.0")
    assert line.startswith("separators=[', ', ': ']; vLLM 0.32.0 uses [',', ':']")


def test_vllm_reproduces_its_own_default_and_nothing_else() -> None:
    assert (
        differences(
            layout(CompileOptions(any_whitespace=True)),
            reach_vllm(layout(CompileOptions(any_whitespace=True))),
            "v",
        )
        == []
    )
    wanted = layout(CompileOptions(any_whitespace=True, strict_mode=False, max_whitespace_cnt=4))
    names = [line.split("=")[0] for line in differences(wanted, reach_vllm(wanted), "v")]
    assert names == ["strict_mode", "max_whitespace_cnt"]


def test_sglang_takes_whitespace_options_as_server_flags() -> None:
    wanted = layout(CompileOptions(any_whitespace=True, max_whitespace_cnt=4))
    reach = reach_sglang(wanted)
    assert reach.flags == ("--constrained-json-max-whitespace-cnt 4",)
    assert differences(wanted, reach, "SGLang") == []
    compact = layout(CompileOptions())
    assert reach_sglang(compact).flags == ("--constrained-json-disable-any-whitespace",)
    assert differences(compact, reach_sglang(compact), "SGLang") == []
    indented = layout(CompileOptions(indent=2))
    assert [d.split("=")[0] for d in differences(indented, reach_sglang(indented), "S")] == [
        "indent",
        "separators",
    ]


def test_openai_sets_no_layout_and_its_strict_mode_is_strict_mode_true() -> None:
    wanted = layout(CompileOptions(indent=2))
    names = [d.split("=")[0] for d in differences(wanted, reach_openai(wanted), "OpenAI")]
    assert names == ["any_whitespace", "indent"]  # an indent comes with its own separators
    loose = layout(CompileOptions(any_whitespace=True, strict_mode=False))
    names = [d.split("=")[0] for d in differences(loose, reach_openai(loose), "OpenAI")]
    assert names == ["any_whitespace", "strict_mode", "separators"]
