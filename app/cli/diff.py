"""``python -m app diff``: one source under two serving stacks, each stack's own work compared
(the tags, the grammars, the Doctor's rows, and every step of a walk whose masks differ)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

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
    from app.engine import AnyEngine, GrammarSpec
    from app.engine.stack_pins import ServeFlags
    from app.engine.stacks.diff import UpgradeDiff
    from app.engine.stacks.diff_doctor import DoctorChange

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
    parser.add_argument(
        "--no-doctor", action="store_true",
        help="leave out the Doctor's examination of each side (doctor_diff is then null)",
    )  # fmt: skip
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
        serves = [serve_flags(request.request, args.reasoning) for request in requests]
        result = upgrade_diff(
            settings,
            args.stack,
            [engine.compile(request.spec) for request in requests],
            engine.model.tokens,
            tokenizer=engine.tools.tokenizer,
            text=args.text,
            token_ids=token_ids,
            serve=serves,
        )
        if not args.no_doctor:
            specs = [request.spec for request in requests]
            changes = _doctor_diff(settings, engine, args.stack, specs, serves)
            result = dataclasses.replace(result, doctor_diff=changes)
    finally:
        engine.close()
    print(json.dumps(result.to_dict()) if args.json else _text(result))
    same = not result.tag_diff and not result.grammar_diff and result.first_step is None
    return 0 if same else 1


def _doctor_diff(
    settings: Settings,
    engine: AnyEngine,
    stacks: Sequence[str],
    specs: Sequence[GrammarSpec],
    serves: Sequence[ServeFlags],
) -> tuple[DoctorChange, ...]:
    """The Doctor's rows that differ between the grammars ``stacks`` compile, examined in this
    process (the user's own, as ``python -m app doctor`` examines)."""
    from app.doctor import Doctor
    from app.engine.stack_pins import MASKSCOPE
    from app.engine.stacks import runner
    from app.engine.stacks.diff_doctor import doctor_changes
    from app.exceptions import CutShortByLoad, GrammarError
    from app.suite.stacked import examined_grammar

    sides: list[dict[str, Any]] = []
    for stack, spec, serve in zip(stacks, specs, serves, strict=True):
        try:
            examining, examined = (engine, spec)
            if stack != MASKSCOPE:
                config = dict(serve.structured_outputs_config)
                examining, examined = examined_grammar(
                    engine, runner(settings, stack), spec, config
                )
            sides.append(Doctor.of(examining).examine(examined, seed=0).to_dict())
        except (GrammarError, CutShortByLoad) as error:
            sides.append({"error": error.to_dict()})
    return doctor_changes(*sides)


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
    if diff.doctor_diff:
        lines.append(f"the Doctor's rows differ at {len(diff.doctor_diff)} place(s):")
        for row in diff.doctor_diff:
            where = " ".join(f"{k}={v}" for k, v in row.key.items()) or "(the examination)"
            shown = (json.dumps(row.a)[:60], json.dumps(row.b)[:60])
            lines.append(f"  {row.kind} {where}: A {shown[0]}  B {shown[1]}")
    elif diff.doctor_diff is not None:
        lines.append("the Doctor finds the same under both")
    if diff.first_step is None:
        lines.append("every step's masks agree")
    else:
        lines.append(f"first step whose masks differ: {diff.first_step}")
    return "\n".join(lines)
