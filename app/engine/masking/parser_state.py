"""The rules xgrammar's Earley parser has active, read from its debug dump.

Since 0.1.21 xgrammar parses with an Earley parser and exposes no stack. The only view of its
states is ``GrammarMatcher._debug_print_internal_state()``, a debug API its authors call subject
to change; this module is the one place that reads it, and its tests pin the format to the pinned
xgrammar version. The dump lists the parser states of the latest position, e.g.::

    There are 22 steps in history. Last step: [
    ParserState(rule_id=25, sequence_id=142, element_id=131, rule_start_pos=19, sub_element_id=0),
    ]
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

__all__ = ["active_rules", "parse_states"]

_STATE = re.compile(r"ParserState\(rule_id=(\d+),[^)]*?rule_start_pos=(-?\d+)")


def parse_states(dump: str) -> list[tuple[int, int]]:
    """(rule id, start position) of every parser state in a debug dump, in dump order."""
    return [(int(rule), int(start)) for rule, start in _STATE.findall(dump)]


def active_rules(matcher: Any, rule_names: Sequence[str]) -> list[str]:
    """Names of the rules with a parser state at the current position, innermost last.

    A rule that started later is nested in one that started earlier, so states are ordered by
    their start position; each rule is named once.

    Args:
        matcher: an ``xgrammar.GrammarMatcher``.
        rule_names: rule names indexed by rule id, from the compiled grammar.
    """
    states = sorted(parse_states(matcher._debug_print_internal_state()), key=lambda s: s[1])
    names: list[str] = []
    for rule_id, _ in states:
        name = rule_names[rule_id] if rule_id < len(rule_names) else f"rule#{rule_id}"
        if name not in names:
            names.append(name)
    return names
