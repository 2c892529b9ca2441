"""Snippets that mask in-process: xgrammar or llguidance with a transformers model."""

from __future__ import annotations

import dataclasses
import importlib.metadata
from typing import Any

from app.engine.grammars.llguidance.options import NOT_CARRIED_WHY, JsonOptions, json_options
from app.engine.grammars.llguidance.tags import ARGUMENTS_UNCHECKED, WHITESPACE_FLEXIBLE
from app.engine.grammars.spec import GrammarKind
from app.export.escape import Code, py
from app.export.model import Model, with_model
from app.export.notes import options_line, pydantic_notes, sampling_notes
from app.export.options import Reach, differences, layout
from app.export.render import render
from app.export.request import ExportRequest
from app.export.snippet import Snippet, constants, header

__all__ = ["llguidance_snippet", "xgrammar_snippet"]

_SEED_NOTE = "transformers draws with torch's generator, Maskscope with its own."
_ANY_TEXT = r"[\s\S]*"
# vLLM 0.32.0's serialize_guidance_grammar for a legacy tag (backend_guidance.py), as written.
_STRUCT_TAG = f"""llguidance.StructTag.to_grammar([
    llguidance.StructTag(
        trigger=next(t for t in TAG["triggers"] if s["begin"].startswith(t)),
        begin=s["begin"],
        grammar=llguidance.LLMatcher.grammar_from_json_schema(
            s["schema"], defaults={{"whitespace_flexible": {WHITESPACE_FLEXIBLE!r}}}
        ),
        end=s["end"],
    )
    for s in TAG["structures"]
])"""


_NO_TAG = "no structural tag: the builder built none, so this program's output is not constrained"


def _version(package: str) -> str:
    return importlib.metadata.version(package)


def _prompt(req: ExportRequest) -> tuple[list[tuple[Code, Code]], Code]:
    if req.raw_prompt is not None:
        return [(Code("PROMPT"), py(req.raw_prompt))], Code("prompt = PROMPT")
    line = "prompt = tokenizer.apply_chat_template(MESSAGES, tokenize=False, "
    return [(Code("MESSAGES"), py(req.chat()))], Code(line + "add_generation_prompt=True)")


def _generate(req: ExportRequest) -> tuple[list[tuple[Code, Code]], Code | None]:
    args = [(Code("max_new_tokens"), py(req.max_tokens))]
    sampling = req.sampling
    if sampling.greedy:
        return [*args, (Code("do_sample"), py(False))], None
    args += [
        (Code("do_sample"), py(True)),
        (Code("temperature"), py(sampling.temperature)),
        (Code("top_p"), py(sampling.top_p)),
        (Code("top_k"), py(0)),  # transformers' default top_k=50 would cut the distribution
    ]
    return args, py(sampling.seed) if sampling.seed is not None else None


def _call(function: str, first: str, options: list[tuple[str, Code]]) -> Code:
    lines = [f"{function}(", f"    {first},", *(f"    {k}={v}," for k, v in options), ")"]
    return Code("\n".join(lines))


def xgrammar_snippet(req: ExportRequest) -> Snippet:
    """xgrammar's compile with exactly the effective options, and a transformers generate loop."""
    code = with_model(req, lambda model, notes: _xgrammar_program(req, model, notes))
    return Snippet("xgrammar", "python", code, tuple(_no_tag(req)))


def _no_tag(req: ExportRequest) -> list[str]:
    return [_NO_TAG] if req.kind is GrammarKind.STRUCTURAL_TAG and req.tag is None else []


def _xgrammar_program(req: ExportRequest, pydantic: Model | None, extra: list[str]) -> str:
    """The xgrammar program; it compiles ``pydantic``'s root model when given, else SCHEMA."""
    root = pydantic.root if pydantic else None
    if req.is_json:
        opts = req.options
        kwargs = [
            ("any_whitespace", py(opts.any_whitespace)),
            ("strict_mode", py(opts.strict_mode)),
            ("indent", py(opts.indent)),
            ("separators", py(opts.separators)),
            ("max_whitespace_cnt", py(opts.max_whitespace_cnt)),
        ]
        compile_ = _call("compile_json_schema", root or "SCHEMA", kwargs)
    elif req.kind is GrammarKind.STRUCTURAL_TAG and req.tag is None:  # tools, no tag built
        compile_ = Code(f"compile_regex({py(_ANY_TEXT)})")
    elif req.kind is GrammarKind.STRUCTURAL_TAG:
        compile_ = Code("compile_structural_tag(TAG)")
    elif req.kind is GrammarKind.EBNF:
        compile_ = Code("compile_grammar(GRAMMAR)")
    else:
        compile_ = Code("compile_regex(REGEX)")
    prompt_consts, prompt = _prompt(req)
    generate, seed = _generate(req)
    notes = [
        f"xgrammar {_version('xgrammar')} with transformers: the same compile Maskscope ran.",
        options_line(req),
        *pydantic_notes(req),
        *extra,
        *sampling_notes(req, "transformers", _SEED_NOTE),
    ]
    return render(
        "xgrammar.py.j2",
        notes=header("xgrammar", notes, _no_tag(req)),
        pydantic=pydantic.source if pydantic else None,
        constants=[*constants(req, with_schema=root is None), *prompt_consts],
        model=py(req.model),
        compile=compile_,
        prompt=prompt,
        generate=generate,
        seed=seed,
    )


def _llguidance_json(req: ExportRequest) -> tuple[JsonOptions, list[str]]:
    """What Maskscope's llguidance engine compiles for the request, and one sentence per option
    it does not carry (its ``not_carried``)."""
    carried = json_options(req.schema, req.options)
    wanted = layout(req.options)
    dropped: dict[str, Any] = dict.fromkeys(carried.not_carried)  # each is None without it
    got = dataclasses.replace(wanted, **dropped)
    stack = f"llguidance {_version('llguidance')}"
    return carried, differences(wanted, Reach(got, why=NOT_CARRIED_WHY), stack)


def llguidance_snippet(req: ExportRequest) -> Snippet:
    """The grammar Maskscope's llguidance engine compiles, and a transformers generate loop."""
    notes = [
        f"llguidance {_version('llguidance')} with transformers.",
        options_line(req),
        *pydantic_notes(req),
    ]
    consts = constants(req)
    missing: list[str] = []
    if req.is_json:
        carried, missing = _llguidance_json(req)
        consts = [(Code("SCHEMA"), py(carried.schema))]
        options = py(carried.options, 4)
        grammar = _call(
            "llguidance.LLMatcher.grammar_from_json_schema", "SCHEMA", [("defaults", options)]
        )
        if req.options.strict_mode:
            notes.append(
                "strict_mode=True: SCHEMA is the schema closed as xgrammar's strict_mode reads "
                "it (additionalProperties: false where it names properties and leaves others "
                "open, items: false after an open prefixItems), as Maskscope's llguidance "
                "engine compiles it."
            )
    elif req.legacy_tag is not None:
        consts = [(Code("TAG"), py(req.legacy_tag))]
        grammar = Code(_STRUCT_TAG)
        notes.append(
            "The tag in its legacy form, through llguidance.StructTag as vLLM's guidance "
            "backend builds it (Maskscope's llguidance engine does the same): "
            f"{ARGUMENTS_UNCHECKED}."
        )
    elif req.kind is GrammarKind.STRUCTURAL_TAG:
        grammar = Code('llguidance.LLMatcher.grammar_from_regex("(?s:.*)")')
        missing.append(
            "the structural tag: llguidance takes only the legacy {structures, triggers} form "
            "(as vLLM's guidance backend does); this one has no llguidance equivalent, so this "
            "program's output is not constrained"
            if req.tag is not None
            else _NO_TAG
        )
    elif req.kind is GrammarKind.EBNF:
        grammar = Code('llguidance.grammar_from("ebnf", GRAMMAR)')
        notes.append(
            "llguidance converts this EBNF to its Lark syntax; xgrammar-only syntax may "
            "not convert."
        )
    else:
        grammar = Code("llguidance.LLMatcher.grammar_from_regex(REGEX)")
        notes.append("llguidance reads the regex with Rust's regex syntax.")
    notes += sampling_notes(req, "transformers", _SEED_NOTE)
    prompt_consts, prompt = _prompt(req)
    generate, seed = _generate(req)
    code = render(
        "llguidance.py.j2",
        notes=header("llguidance", notes, missing),
        constants=[*consts, *prompt_consts],
        model=py(req.model),
        grammar=grammar,
        prompt=prompt,
        generate=generate,
        seed=seed,
    )
    return Snippet("llguidance", "python", code, tuple(missing))
