"""Pinned to xgrammar 0.2.9: its debug dump is the only view of the Earley parser's states."""

from __future__ import annotations

import json
from importlib.metadata import version

import xgrammar as xgr

from app.engine.masking.parser_state import active_rules, parse_states

DUMP = """There are 22 steps in history. Last step: [
ParserState(rule_id=25, sequence_id=142, element_id=131, rule_start_pos=19, sub_element_id=0),
ParserState(rule_id=24, sequence_id=138, element_id=125, rule_start_pos=21, sub_element_id=0),
ParserState(rule_id=0, sequence_id=4, element_id=2, rule_start_pos=-1, sub_element_id=0),
]"""

GRAMMAR = 'root ::= "(" inner ")"\ninner ::= item+\nitem ::= "a" | "b" | "(" inner ")"'
VOCAB = ["a", "b", "(", ")", "<eos>"]


def _matcher() -> tuple[xgr.GrammarMatcher, list[str]]:
    info = xgr.TokenizerInfo(VOCAB, stop_token_ids=[4])
    compiled = xgr.GrammarCompiler(info, cache_enabled=False).compile_grammar(GRAMMAR)
    names = [rule[0] for rule in json.loads(compiled.grammar.serialize_json())["rules"]]
    return xgr.GrammarMatcher(compiled), names


def test_pinned_xgrammar_version() -> None:
    # The dump format below is xgrammar 0.2.9's; an upgrade must re-check this module.
    assert version("xgrammar") == "0.2.9"


def test_parse_states_reads_rule_ids_and_start_positions() -> None:
    assert parse_states(DUMP) == [(25, 19), (24, 21), (0, -1)]
    assert parse_states("There are 3 steps in history. Last step: [\n]") == []


def test_the_live_dump_has_the_pinned_format() -> None:
    matcher, _ = _matcher()
    dump = matcher._debug_print_internal_state()
    assert dump.startswith("There are 1 steps in history. Last step: [")
    assert parse_states(dump) == [(0, -1)]


def test_active_rules_are_named_outermost_first() -> None:
    matcher, names = _matcher()
    assert active_rules(matcher, names) == ["root"]
    assert matcher.accept_token(VOCAB.index("("))
    assert matcher.accept_token(VOCAB.index("a"))
    assert active_rules(matcher, names) == ["root", "item"]


def test_a_finished_parse_has_no_active_rule() -> None:
    matcher, names = _matcher()
    for token in "(a)":
        assert matcher.accept_token(VOCAB.index(token))
    assert active_rules(matcher, names) == []
