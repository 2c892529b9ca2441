"""``python -m app diff``: one source under two serving stacks, each stack's own work compared
(the tags, the grammars, and every step of a walk whose masks differ)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from app.cli.options import (
    add_grammar_arguments,
    add_reasoning_argument,
    grammar_request,
    kind_of,
    load_engine,
)
from app.cli.replay import replayed_ids
from app.settings import Settings

if TYPE_CHECKING:
    from app.engine.stacks.diff import UpgradeDiff

__all__ = ["HELP", "NAME", "add_arguments", "run"]

NAME = "diff"
HELP = "the same source under two stacks: tag, grammar and mask differences"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``diff``'s flags: two ``--stack``, the grammar, and what to walk (as ``replay``)."""
    parser.add_argument(
        "--stack", action="append", required=True, metavar="STACK",
        help="a stack of `python -m app stacks` (give two: A, then B)",
    )  # fmt: skip
    add_grammar_arguments(parser)
    parser.add_argument("--text", help="a text to walk under both stacks (before the ids)")
    parser.add_argument("--token-ids", metavar="1,2,3", help="token ids to walk, after the text")
    parser.add_argument("--log", metavar="LINE", help="a vLLM log line whose ids are walked")
    parser.add_argument("--json", action="store_true", help="print the diff as JSON")
    add_reasoning_argument(parser)


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Exit 0 when the two stacks build and mask alike, 1 when they differ, 2 on usage."""
    if len(args.stack) != 2:
        print(f"diff: give --stack twice (got {len(args.stack)})", file=sys.stderr)
        return 2
    from app.engine.grammars.request import serve_flags
    from app.engine.stacks.diff import upgrade_diff

    token_ids = replayed_ids(args)
    engine = load_engine(args, settings)  # first: a pasted request is derived on its tokenizer
    try:
        if kind_of(args) == "request":  # derived by each stack's own code
            requests = [
                grammar_request(
                    argparse.Namespace(**{**vars(args), "stack": stack}), settings, engine
                )
                for stack in args.stack
            ]
        else:
            requests = [grammar_request(args, settings)] * 2
        result = upgrade_diff(
            settings,
            args.stack,
            [engine.compile(request.spec) for request in requests],
            engine.model.tokens,
            tokenizer=engine.tools.tokenizer,
            text=args.text,
            token_ids=token_ids,
            serve=[serve_flags(request.request, args.reasoning) for request in requests],
        )
    finally:
        engine.close()
    print(json.dumps(result.to_dict()) if args.json else _text(result))
    same = not result.tag_diff and not result.grammar_diff and result.first_step is None
    return 0 if same else 1


def _text(diff: UpgradeDiff) -> str:
    """The diff for a terminal: the tag's pointers, the grammar's diff, the differing steps."""
    a, b = diff.stacks
    lines = [f"A = {a}, B = {b}"]
    if diff.tag_diff:
        lines.append(f"the tags differ at {len(diff.tag_diff)} pointer(s):")
        for change in diff.tag_diff:
            shown = (json.dumps(change.a)[:60], json.dumps(change.b)[:60])
            lines.append(f"  {change.pointer or '(the whole tag)'}: A {shown[0]}  B {shown[1]}")
    else:
        lines.append("the tags are the same")
    lines.append(diff.grammar_diff.rstrip("\n") or "the grammars are the same")
    for walk, stack in zip(diff.walks, diff.stacks, strict=True):
        where = f", refused at token {walk.rejection.token_index}" if walk.rejection else ""
        lines.append(f"{stack}: accepted {walk.accepted}, complete {walk.complete}{where}")
    for step in diff.steps:
        lines.append(
            f"step {step.index} ({step.token!r}): only A allows {step.only_a.count} "
            f"{list(step.only_a.examples)}; only B allows {step.only_b.count} "
            f"{list(step.only_b.examples)}"
        )
    if diff.first_step is None:
        lines.append("every step's masks agree")
    else:
        lines.append(f"first step whose masks differ: {diff.first_step}")
    return "\n".join(lines)
