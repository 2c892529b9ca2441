"""``python -m app trace``: generate under a grammar, one line (or step record) per step."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from app.cli.options import (
    add_compare_argument,
    add_grammar_arguments,
    add_reasoning_argument,
    compare_library,
    grammar_request,
    load_engine,
)
from app.exceptions import InvalidInput
from app.settings import Settings

if TYPE_CHECKING:
    from app.engine import ChatMessage, StepRecord

__all__ = ["HELP", "NAME", "add_arguments", "run", "step_line"]

NAME = "trace"
HELP = "generate under a grammar, one line per step"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``trace``'s flags."""
    add_grammar_arguments(parser)
    parser.add_argument("--prompt", required=True, help="the user message")
    parser.add_argument("--system", help="a system message")
    parser.add_argument(
        "--schema-in-prompt", action="store_true", help="append the schema to the system message"
    )
    parser.add_argument("--raw", action="store_true", help="use --prompt as raw text, no template")
    parser.add_argument("--steps", type=int, default=256, help="max tokens (default 256)")
    parser.add_argument("--temperature", type=float, default=0.0, help="0 is greedy (default)")
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--seed", type=int, help="sampling seed (random when omitted)")
    parser.add_argument("--json", action="store_true", help="JSON Lines: one step record a line")
    parser.add_argument(
        "--break", dest="breaks", action="append", default=[], metavar="WHEN[=VALUE][,k=K]",
        help="stop where this condition starts to hold, e.g. path='$.items[3]*', "
        "top1_blocked,k=3, removed_above=0.9, runaway_number (repeatable)",
    )  # fmt: skip
    add_compare_argument(parser)
    add_reasoning_argument(parser)


def _messages(args: argparse.Namespace, schema: str) -> list[ChatMessage]:
    from app.engine import ChatMessage, with_schema

    system = args.system or ""
    if args.schema_in_prompt:
        system = with_schema(system, schema)
    messages = [ChatMessage("system", system)] if system else []
    messages.append(ChatMessage("user", args.prompt))
    return messages


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Generate, printing each step; exit 0 when the output is complete and valid, 1 otherwise."""
    from app.engine import GrammarKind, SamplingParams
    from app.engine.stepper.breakpoints import parse_breakpoint
    from app.vocabulary import ReasoningMode

    try:
        breaks = [parse_breakpoint(text) for text in args.breaks]
    except InvalidInput as error:
        raise InvalidInput(f"--break {error.message}") from None
    request = grammar_request(args, settings)
    messages = _messages(args, request.spec.source)
    engine = load_engine(args, settings)
    try:
        session = engine.new_session(
            request.spec,
            messages=() if args.raw else messages,
            raw_prompt=args.prompt if args.raw else None,
            sampling=SamplingParams.create(args.temperature, args.top_p, args.seed),
            max_tokens=args.steps,
            compare=compare_library(args),
            reasoning=ReasoningMode(args.reasoning),
            breakpoints=breaks,
        )
        for warning in session.grammar.warnings:
            print(f"{args.engine}: {warning}", file=sys.stderr)
        ignored = session.grammar.not_carried
        if request.spec.kind in (GrammarKind.STRUCTURAL_TAG, GrammarKind.TOOLS):
            print(f"a structural tag takes no compile options: {', '.join(ignored)} ignored",
                  file=sys.stderr)  # fmt: skip
            for free in session.grammar.unconstrained:
                print(f"unconstrained: {free}", file=sys.stderr)
        else:
            for option in ignored:
                print(f"{args.engine}: {option} is not carried over", file=sys.stderr)
        while not session.done and session.watch.hit is None:
            record = session.step()
            print(json.dumps(record.to_dict()) if args.json else step_line(record), flush=True)
        if session.watch.hit is not None:
            hit = session.watch.hit
            print(f"break at step {hit.index}: {hit.breakpoint.label}", file=sys.stderr)
        validation = session.validation()
        if validation is not None and request.validate is not None:
            validation = request.validate(session.text)
    finally:
        engine.close()
    reason = session.stop_reason.value if session.stop_reason else None
    verdict = validation.to_dict() if validation else None
    if args.json:
        print(
            json.dumps(
                {
                    "text": session.text,
                    "done": session.done,
                    "stop_reason": reason,
                    "validation": verdict,
                }
            )
        )
    else:
        print(f"\n{session.text}\n\nstop: {reason}; valid: {verdict}")
        if session.follower is not None:
            first = session.first_divergence
            where = "no divergence" if first is None else f"first divergence at step {first}"
            print(f"{session.follower.engine}: {where}")
    return 0 if session.complete and validation is not None and validation.valid else 1


def step_line(record: StepRecord) -> str:
    """One step for a terminal: the token, the mask's size, the top blocked token, the place in
    the grammar, the time, and what went unusual."""
    blocked = next((t for t in record.top if not t.allowed), None)
    blocked_text = f"{blocked.text!r} {blocked.prob:.3f}" if blocked else "-"
    return (
        f"{record.index:>4} {record.token_text!r:<18} allowed {record.allowed_count:>6}"
        f"  top blocked {blocked_text:<22} depth {record.depth}  {record.path or '-':<28}"
        f" {record.total_ms:7.1f} ms{'  FORCED' if record.forced else ''}"
        f"{'' if record.mask_accept_agree else '  MASK/ACCEPT DISAGREE'}"
        f"{_follower_note(record)}"
        f"{'  ALARM ' + ', '.join(record.alarms) if record.alarms else ''}"
    )


def _follower_note(record: StepRecord) -> str:
    """Compare mode: what the follower saw differently at this step ("" when nothing)."""
    follower = record.follower
    if follower is None or not follower.diverged:
        return ""
    if follower.refused is not None:
        return f"  {follower.engine.upper()} ENDED: {follower.refused}"
    return (
        f"  {follower.engine}: +{follower.only_follower} -{follower.only_driver}"
        f" allowed {follower.allowed_count}, jump-forward {follower.jump_forward!r}"
    )
