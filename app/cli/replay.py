"""``python -m app replay``: walk a text, token ids or a vLLM log line's ids through a grammar,
no model run."""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import TYPE_CHECKING

from app.cli.options import (
    GrammarRequest,
    add_compare_argument,
    add_grammar_arguments,
    add_reasoning_argument,
    compare_library,
    grammar_request,
    load_engine,
)
from app.settings import Settings

if TYPE_CHECKING:
    from app.engine import AnyEngine, ReplayResult
    from app.engine.records import Refusal

__all__ = ["HELP", "NAME", "add_arguments", "replayed_ids", "run"]

NAME = "replay"
HELP = "check a text or token ids against a grammar, no model"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``replay``'s flags."""
    add_grammar_arguments(parser)
    parser.add_argument(
        "--text", help="the text to walk through the grammar (before the ids, when given)"
    )
    parser.add_argument(
        "--token-ids", metavar="1,2,3",
        help="token ids of the --model's tokenizer, after the text (a logged batch)",
    )  # fmt: skip
    parser.add_argument(
        "--log", metavar="LINE",
        help="a pasted vLLM log line (grammar rejected tokens [...], failed to advance FSM, "
        "rejected draft token): its ids follow the text and --token-ids",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the replay as JSON")
    parser.add_argument(
        "--stack", default="maskscope",
        help="the serving stack whose own code masks each step (`python -m app stacks`; "
        "default maskscope, in-process)",
    )  # fmt: skip
    add_compare_argument(parser)
    add_reasoning_argument(parser)


def replayed_ids(args: argparse.Namespace) -> list[int] | None:
    """The ids of ``--token-ids`` then ``--log``, None when neither is given.

    Raises:
        InvalidInput: an item of --token-ids is not an integer, or the log line holds none of
            the messages read.
    """
    from app.engine.vllm_log import parse_log_line
    from app.exceptions import InvalidInput

    if args.token_ids is None and args.log is None:
        return None
    ids: list[int] = []
    for position, item in enumerate(filter(None, re.split(r"[\s,]+", args.token_ids or ""))):
        if not re.fullmatch(r"\d+", item.strip("[]")):
            raise InvalidInput(f"--token-ids: item {position} ({item!r}) is not a token id")
        ids.append(int(item.strip("[]")))
    if args.log is not None:
        ids += parse_log_line(args.log).token_ids
    return ids


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Replay ``--text``, then ``--token-ids``, then ``--log``'s ids; exit 0 when accepted and
    complete, 1 otherwise, 2 when nothing is given to replay."""
    token_ids = replayed_ids(args)
    if args.text is None and token_ids is None:
        print("replay: give --text, --token-ids or --log (or several)", file=sys.stderr)
        return 2
    from app.vocabulary import ReasoningMode

    engine = load_engine(args, settings)  # first: a pasted request is derived on its tokenizer
    try:
        request = grammar_request(args, settings, engine)
        if args.stack != "maskscope":
            result = _on_stack(args, settings, engine, request, token_ids)
        else:
            result = engine.replay(
                request.spec,
                text=args.text,
                token_ids=token_ids,
                compare=compare_library(args),
                reasoning=ReasoningMode(args.reasoning),
            )
    finally:
        engine.close()
    print(json.dumps(result.to_dict()) if args.json else _text(result))
    return 0 if result.accepted and result.complete else 1


def _on_stack(
    args: argparse.Namespace,
    settings: Settings,
    engine: AnyEngine,
    request: GrammarRequest,
    token_ids: list[int] | None,
) -> ReplayResult:
    """The replay under ``--stack``: each row the one that release's own scheduler fills (a
    pasted request's under its own serve flags)."""
    from app.engine.grammars.request import serve_flags
    from app.engine.stacks import runner
    from app.engine.stacks.replay import stack_replay

    return stack_replay(
        runner(settings, args.stack),
        engine.compile(request.spec),
        engine.model.tokens,
        tokenizer=engine.tools.tokenizer,
        text=args.text,
        token_ids=token_ids or (),
        serve=serve_flags(request.request, args.reasoning),
    )


def _text(result: ReplayResult) -> str:
    """The replay for a terminal: one line per token, the rejection, the verdicts."""
    lines = [
        f"{'ok ' if token.accepted else 'NO '}{token.text!r:<18} allowed "
        f"{token.allowed_count:>6}  depth {token.depth}  {token.path or '-'}"
        for token in result.tokens
    ]
    if result.rejection:
        rej = result.rejection
        lines.append(
            f"\nrejected at offset {rej.offset} (token {rej.token_index}, "
            f"{rej.token_text!r}); the grammar accepts e.g. {list(rej.expected)}"
        )
    if result.refusal:
        lines += _refusal(result.refusal)
    lines.append(f"accepted: {result.accepted}; complete: {result.complete}")
    if result.mask_by is not None:
        by = result.mask_by
        lines.append(f"masked by {by['stack']}: {by.get('library')} {by.get('version')}")
    if result.follower is not None:
        other = result.follower
        where = f" (refused at offset {other.rejection.offset})" if other.rejection else ""
        lines.append(
            f"{other.engine}: accepted: {other.accepted}; complete: {other.complete}{where}"
        )
    return "\n".join(lines)


def _refusal(refusal: Refusal) -> list[str]:
    """The first refused id explained: its spelling, the state, the mask, the tag's cause."""
    allowed = refusal.allowed
    if refusal.allowed_tokens is not None:
        there = ", ".join(repr(t) for t in refusal.allowed_tokens)
    else:
        there = "blocked entirely: " + (
            "; ".join(f"{c.label} ({c.count})" for c in allowed.blocked_classes) or "no class"
        )
    lines = [
        f"first refused id {refusal.token_id} {refusal.token!r}"
        f"{' (special)' if refusal.special else ''} at token {refusal.index}, in the state "
        f"{' > '.join(refusal.rules) or '-'}, after {refusal.after[-30:]!r}",
        f"allowed there: {allowed.allowed_count} of {allowed.vocab_size}; {there}",
    ]
    if refusal.cause:
        lines.append(f"cause: {refusal.cause}")
    return lines
