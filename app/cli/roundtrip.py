"""``python -m app roundtrip``: does the tag vLLM builds accept what the chat template writes?

Each tool's minimal call (and the ``--example`` calls), rendered by the model's chat template
(or ``--template``; DeepSeek V4's is the stack's own encoder, rendered in its runner) as one
call, two parallel calls, with and without reasoning, is replayed through the tag vLLM's builder
makes for the same request (``app.doctor.roundtrip``): under ``--stack NAME`` walked by that
release's own backend and reasoning parser, under ``maskscope`` (the default) by Maskscope's
xgrammar.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from app.exceptions import InvalidInput
from app.settings import Settings

__all__ = ["HELP", "NAME", "add_arguments", "run"]

NAME = "roundtrip"
HELP = "does the grammar accept what the model's chat template writes for its tool calls"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``roundtrip``'s flags."""
    parser.add_argument("--tools", required=True, type=Path, help="a JSON list of tools")
    parser.add_argument("--parser", required=True, help="vLLM's --tool-call-parser, e.g. hermes")
    parser.add_argument("--model", default="qwen3.6", help="a tokenizer-only model (qwen3.6)")
    parser.add_argument("--template", type=Path, help="a chat template (default: the model's)")
    parser.add_argument("--tool-choice", default="required", help="auto, required, ...")
    parser.add_argument("--reasoning-parser", help="vLLM's --reasoning-parser, e.g. qwen3")
    parser.add_argument("--no-strict", action="store_true", help="strict tool calling off")
    parser.add_argument("--example", action="append", default=[], help='{"name", "arguments"}')
    parser.add_argument(
        "--stack", default="maskscope",
        help="the serving stack that builds the tag, renders an encoder template and walks "
        "each turn with its own code (`python -m app stacks`; default maskscope: the default "
        "vLLM builder's tag, walked in-process)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the results as JSON")


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise InvalidInput(f"{what} {path.name}: {error}") from error


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Print each case's verdict; exit 1 when the tag refuses one, else 0."""
    from app.doctor.roundtrip import round_trip
    from app.engine.factories.tokenizer_only import open_tokenizer
    from app.engine.grammars.tools.base import ToolsRequest
    from app.engine.grammars.tools.vllm_builder import VllmBuilder
    from app.engine.model.chat_templates import ChatTemplate, in_stack, template_for
    from app.engine.model.shipped_tokenizers import tokenizer_dir
    from app.engine.stacks import runner

    tools = _read_json(args.tools, "the tools file")
    examples = [json.loads(e) for e in args.example]
    engine = open_tokenizer(settings, args.model)
    if engine is None:
        raise InvalidInput(f"no tokenizer-only model is named {args.model!r}")
    local = args.stack == "maskscope"
    # the stack's runner is kept warm for the next call; a builder of our own is closed here
    builder = VllmBuilder(settings) if local else runner(settings, args.stack)
    try:
        tokens = engine.model.tokens
        shipped = str(engine.model.spec.tokenizer)
        directory = str(tokenizer_dir(shipped, settings.cache_dir))
        if args.template is not None:
            text = args.template.read_text(encoding="utf-8")
            template = ChatTemplate(text, "pasted", args.template.name)
        else:
            template = in_stack(template_for(tokens, shipped=shipped), builder, directory)

        def request_for(reasoning: bool) -> ToolsRequest:
            return ToolsRequest(
                builder="vllm", format=args.parser, tools=tuple(tools),
                tool_choice=args.tool_choice, strict_tool_calling=not args.no_strict,
                reasoning="enabled" if reasoning else "disabled",
                reasoning_parser=args.reasoning_parser if reasoning else None,
            )  # fmt: skip

        def tag_for(reasoning: bool) -> tuple[Any, str | None]:
            built = builder.build(request_for(reasoning), directory)
            if built.tag is None:
                raise InvalidInput(f"vLLM builds no tag for this request: {built.reason}")
            return built.tag, built.reasoning_end

        results = round_trip(
            engine, template, tools, tag_for, examples=examples,
            stack=None if local else builder, tokenizer=directory,
            request_for=None if local else request_for,
        )  # fmt: skip
    finally:
        if local:
            builder.close()
        engine.close()
    if args.json:
        print(json.dumps([r.to_dict() for r in results], indent=2))
    else:
        for r in results:
            print(r.finding() or f"accepted: {r.case}{' with reasoning' if r.reasoning else ''}")
    return 1 if any(not r.accepted for r in results) else 0
