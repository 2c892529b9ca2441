"""``python -m app replay``: walk a text through a grammar, no model run."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from app.cli.options import (
    add_compare_argument,
    add_grammar_arguments,
    compare_library,
    grammar_request,
    load_engine,
)
from app.settings import Settings

if TYPE_CHECKING:
    from app.engine import ReplayResult

__all__ = ["HELP", "NAME", "add_arguments", "run"]

NAME = "replay"
HELP = "check a text against a grammar, no model"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``replay``'s flags."""
    add_grammar_arguments(parser)
    parser.add_argument("--text", required=True, help="the text to walk through the grammar")
    parser.add_argument("--json", action="store_true", help="print the replay as JSON")
    add_compare_argument(parser)


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Replay ``--text``; exit 0 when it is accepted and complete, 1 otherwise."""
    spec = grammar_request(args, settings).spec
    engine = load_engine(args, settings)
    try:
        result = engine.replay(spec, text=args.text, compare=compare_library(args))
    finally:
        engine.close()
    print(json.dumps(result.to_dict()) if args.json else _text(result))
    return 0 if result.accepted and result.complete else 1


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
    lines.append(f"accepted: {result.accepted}; complete: {result.complete}")
    if result.follower is not None:
        other = result.follower
        where = f" (refused at offset {other.rejection.offset})" if other.rejection else ""
        lines.append(
            f"{other.engine}: accepted: {other.accepted}; complete: {other.complete}{where}"
        )
    return "\n".join(lines)
