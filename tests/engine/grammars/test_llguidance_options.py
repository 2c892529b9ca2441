"""xgrammar's options carried to llguidance: each mapped option gives both libraries the same
language token by token over a document that exercises it, or is listed in ``not_carried``."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from app.engine import CompileOptions, Engine, GrammarKind, GrammarSpec, MaskingLibrary, presets
from app.engine.grammars.llguidance.options import effective_separators, json_options, strict_schema
from app.engine.mask import allowed_array, new_bitmask
from app.engine.masking import new_masking

SCHEMA = {
    "type": "object",
    "properties": {
        "a": {"type": "integer"},
        "b": {"type": "array", "items": {"type": "boolean"}},
        "c": {"type": "object", "properties": {"d": {"type": "string"}}},
    },
    "required": ["a"],
}


@pytest.mark.parametrize(
    ("options", "separators"),
    [
        (CompileOptions(), (", ", ": ")),
        (CompileOptions(any_whitespace=True), (",", ":")),
        (CompileOptions(indent=2), (",", ": ")),
        (CompileOptions(separators=(";", "=")), (";", "=")),
    ],
)
def test_effective_separators_are_xgrammars(
    options: CompileOptions, separators: tuple[str, str]
) -> None:
    assert effective_separators(options) == separators


def test_strict_schema_closes_what_xgrammars_strict_mode_closes() -> None:
    schema = {
        "type": "object",
        "properties": {"o": {"type": "object"}, "p": {"type": "object", "required": ["x"]}},
        "$defs": {"t": {"prefixItems": [{"type": "integer"}]}},
        "anyOf": [{"properties": {"q": {}}, "additionalProperties": True}],
    }
    closed = strict_schema(schema)
    assert closed["additionalProperties"] is False
    assert "additionalProperties" not in closed["properties"]["o"]  # "any object", even strict
    assert closed["properties"]["p"]["additionalProperties"] is False
    assert closed["$defs"]["t"]["items"] is False
    assert closed["anyOf"][0]["additionalProperties"] is True
    assert "additionalProperties" not in schema  # the input is not changed


@pytest.mark.parametrize(
    ("options", "not_carried"),
    [
        (CompileOptions(indent=2), ("indent",)),
        (CompileOptions(any_whitespace=True, indent=2), ()),  # xgrammar ignores it too
        (CompileOptions(any_whitespace=True, max_whitespace_cnt=2), ("max_whitespace_cnt",)),
        (CompileOptions(max_whitespace_cnt=2), ()),  # no free whitespace to bound
    ],
)
def test_options_without_an_equivalent_are_not_carried(
    engine: Engine, options: CompileOptions, not_carried: tuple[str, ...]
) -> None:
    assert json_options(SCHEMA, options).not_carried == not_carried
    spec = GrammarSpec(
        GrammarKind.JSON_SCHEMA, json.dumps(SCHEMA), options, MaskingLibrary.LLGUIDANCE
    )
    assert engine.compile(spec).not_carried == not_carried


def _walk_both(engine: Engine, options: CompileOptions, text: str) -> tuple[bool, bool]:
    """Walk ``text``'s tokens through both libraries, checking at each step that the masks
    differ only by llguidance leaving out non-canonical spellings of forced text (tokens it
    still accepts); returns whether each library accepted the whole text.

    Inside strings the libraries differ whatever the options, which compare mode shows and
    this test is not about: xgrammar 0.2.9 allows the tokenizer's special tokens (as their
    text, e.g. ``<|endoftext|>``) and a raw DEL (0x7F, which JSON allows unescaped) in any
    string, and a raw tab in some; llguidance 1.7.6 allows none of them. Those tokens are left
    out of the comparison, and the documents hold no string values (keys of properties the
    schema names are forced).
    """
    spec = GrammarSpec(GrammarKind.JSON_SCHEMA, json.dumps(SCHEMA), options)
    xgr = new_masking(engine.compile(spec))
    llg_spec = dataclasses.replace(spec, library=MaskingLibrary.LLGUIDANCE)
    llg = new_masking(engine.compile(llg_spec))
    vocab = engine.model.tokens.vocab_size
    xbits, lbits = new_bitmask(vocab), new_bitmask(vocab)
    special = np.zeros(vocab, dtype=bool)
    lltokenizer = engine.llguidance.tokenizer()
    raw = engine.model.tokens.token_bytes
    special[[i for i in range(vocab) if lltokenizer.is_special_token(i) or b"\x7f" in raw[i]
             or b"\t" in raw[i]]] = True  # fmt: skip
    for index, token in enumerate(engine.model.tokens.encode(text)):
        xgr.fill_next_token_bitmask(xbits)
        llg.fill_next_token_bitmask(lbits)
        x = allowed_array(xbits[0], vocab) & ~special
        g = allowed_array(lbits[0], vocab) & ~special
        assert not np.flatnonzero(g & ~x).tolist(), f"llguidance allows more at step {index}"
        hidden = np.flatnonzero(x & ~g).tolist()
        refused = [engine.model.tokens.token_bytes[t] for t in hidden if not llg.probe_token(t)]
        assert not refused, f"masks differ at step {index}: {refused[:8]}"
        took_x, took_l = xgr.accept_token(token), llg.accept_token(token)
        assert took_x == took_l, f"step {index}: xgrammar {took_x}, llguidance {took_l}"
        if not took_x:
            return False, False
    return xgr.is_completed(), llg.is_completed()


@pytest.mark.parametrize(
    ("name", "options", "text", "accepted"),
    [
        ("default separators", CompileOptions(), '{"a": 1, "b": [true, false]}', True),
        ("separators", CompileOptions(separators=(",", ":")), '{"a":1,"b":[],"c":{}}', True),
        ("separators refuse others", CompileOptions(separators=(",", ":")), '{"a": 1}', False),
        ("any_whitespace", CompileOptions(any_whitespace=True),
         '{ "a" : 1 ,\n  "b":[ true,false ] }', True),
        ("strict_mode closes", CompileOptions(), '{"a": 1, "z": 2}', False),
        ("strict_mode off", CompileOptions(strict_mode=False), '{"a": 1, "z": [2]}', True),
        ("vllm preset", presets(MaskingLibrary.LLGUIDANCE)["vllm"],
         '{"a":1, "z": {"y": null}}', True),
    ],
)  # fmt: skip
def test_a_mapped_option_gives_both_libraries_the_same_masks(
    engine: Engine, name: str, options: CompileOptions, text: str, accepted: bool
) -> None:
    assert _walk_both(engine, options, text) == (accepted, accepted), name


def test_the_vllm_preset_is_vllms_guidance_backend() -> None:
    """backend_guidance.py (vLLM 0.32.0): whitespace_flexible, additionalProperties as written,
    llguidance's own separators."""
    options = presets(MaskingLibrary.LLGUIDANCE)["vllm"]
    carried = json_options(SCHEMA, options)
    assert carried.options == {
        "whitespace_flexible": True,
        "item_separator": ",",
        "key_separator": ":",
    }
    assert carried.schema == SCHEMA and carried.not_carried == ()
