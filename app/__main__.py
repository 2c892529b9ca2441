"""Command line: ``python -m app serve|trace|replay`` (see ``python -m app --help``)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from app.exceptions import MaskscopeError

if TYPE_CHECKING:
    from app.engine import GrammarSpec, StepRecord

_KIND_BY_SUFFIX = {".json": "json_schema", ".py": "pydantic", ".ebnf": "ebnf", ".regex": "regex"}
_KINDS = ("json_schema", "pydantic", "ebnf", "regex")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m app", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="serve the playground")
    serve.add_argument("--host", help="address to bind (default 127.0.0.1, MASKSCOPE_HOST)")
    serve.add_argument("--port", type=int, help="port to bind (default 8000, MASKSCOPE_PORT)")

    trace = commands.add_parser("trace", help="generate under a grammar, one line per step")
    _grammar_arguments(trace)
    trace.add_argument("--prompt", required=True, help="the user message")
    trace.add_argument("--system", help="a system message")
    trace.add_argument(
        "--schema-in-prompt", action="store_true", help="append the schema to the system message"
    )
    trace.add_argument("--raw", action="store_true", help="use --prompt as raw text, no template")
    trace.add_argument("--steps", type=int, default=256, help="max tokens (default 256)")
    trace.add_argument("--temperature", type=float, default=0.0, help="0 is greedy (default)")
    trace.add_argument("--top-p", type=float, default=1.0)
    trace.add_argument("--seed", type=int, help="sampling seed (random when omitted)")
    trace.add_argument("--json", action="store_true", help="JSON Lines: one step record a line")

    replay = commands.add_parser("replay", help="check a text against a grammar, no model")
    _grammar_arguments(replay)
    replay.add_argument("--text", required=True, help="the text to walk through the grammar")
    replay.add_argument("--json", action="store_true", help="print the replay as JSON")
    return parser


def _grammar_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--schema", required=True, type=Path, help="schema or grammar file")
    parser.add_argument("--kind", choices=_KINDS, help="default: from the file's extension")
    parser.add_argument(
        "--any-whitespace", action="store_true", help="allow any whitespace in JSON (slower)"
    )
    parser.add_argument("--root-model", help="Pydantic: the model to use (default: the last)")


def _kind(args: argparse.Namespace) -> str:
    kind: str | None = args.kind or _KIND_BY_SUFFIX.get(args.schema.suffix)
    if kind is None:
        raise SystemExit(f"cannot tell the kind of {args.schema} from its extension: use --kind")
    return kind


def _spec(args: argparse.Namespace) -> GrammarSpec:
    from app.engine import CompileOptions, GrammarKind, GrammarSpec

    kind = _kind(args)
    source = args.schema.read_text(encoding="utf-8")
    options = CompileOptions(any_whitespace=args.any_whitespace)
    if kind == "pydantic":
        from app.sandbox.sandbox import Sandbox
        from app.settings import Settings

        derived = Sandbox.from_settings(Settings()).schema(source, args.root_model)
        return GrammarSpec(GrammarKind.JSON_SCHEMA, json.dumps(derived.schema, indent=2), options)
    return GrammarSpec(GrammarKind(kind), source, options)


def _quiet_libraries() -> None:
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def _step_line(record: StepRecord) -> str:
    blocked = next((t for t in record.top if not t.allowed), None)
    blocked_text = f"{blocked.text!r} {blocked.prob:.3f}" if blocked else "-"
    return (
        f"{record.index:>4} {record.token_text!r:<18} allowed {record.allowed_count:>6}"
        f"  top blocked {blocked_text:<22} depth {record.depth}  {record.path or '-':<28}"
        f" {record.total_ms:7.1f} ms{'  FORCED' if record.forced else ''}"
        f"{'' if record.mask_accept_agree else '  MASK/ACCEPT DISAGREE'}"
    )


def _trace(args: argparse.Namespace) -> int:
    from app.engine import ChatMessage, Engine, SamplingParams, with_schema
    from app.settings import Settings

    spec = _spec(args)
    system = args.system or ""
    if args.schema_in_prompt:
        system = with_schema(system, spec.source)
    engine = Engine.load(Settings())
    try:
        messages = [ChatMessage("system", system)] if system else []
        messages.append(ChatMessage("user", args.prompt))
        session = engine.new_session(
            spec,
            messages=() if args.raw else messages,
            raw_prompt=args.prompt if args.raw else None,
            sampling=SamplingParams.create(args.temperature, args.top_p, args.seed),
            max_tokens=args.steps,
        )
        for warning in session.grammar.warnings:
            print(f"xgrammar: {warning}", file=sys.stderr)
        while not session.done:
            record = session.step()
            print(json.dumps(record.to_dict()) if args.json else _step_line(record), flush=True)
        validation = session.validation()
        if validation is not None and _kind(args) == "pydantic":
            from app.sandbox.sandbox import Sandbox

            source = args.schema.read_text(encoding="utf-8")
            validation = Sandbox.from_settings(Settings()).validate(
                source, args.root_model, session.text
            )
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
    return 0 if session.complete and validation is not None and validation.valid else 1


def _replay(args: argparse.Namespace) -> int:
    from app.engine import Engine
    from app.settings import Settings

    spec = _spec(args)
    engine = Engine.load(Settings())
    try:
        result = engine.replay(spec, text=args.text)
    finally:
        engine.close()
    if args.json:
        print(json.dumps(result.to_dict()))
    else:
        for token in result.tokens:
            mark = "ok " if token.accepted else "NO "
            print(
                f"{mark}{token.text!r:<18} allowed {token.allowed_count:>6}  depth "
                f"{token.depth}  {token.path or '-'}"
            )
        if result.rejection:
            rej = result.rejection
            print(
                f"\nrejected at offset {rej.offset} (token {rej.token_index}, "
                f"{rej.token_text!r}); the grammar accepts e.g. {list(rej.expected)}"
            )
        print(f"accepted: {result.accepted}; complete: {result.complete}")
    return 0 if result.accepted and result.complete else 1


def _serve(args: argparse.Namespace) -> int:
    import logging

    import uvicorn

    from app.main import create_app
    from app.settings import Settings

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    settings = Settings()
    host, port = args.host or settings.host, args.port or settings.port
    print(f"Maskscope is starting: open http://{host}:{port}/", flush=True)
    # Our own access log carries request ids; uvicorn's would repeat every line without them.
    uvicorn.run(create_app(settings), host=host, port=port, log_level="info", access_log=False)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = _parser().parse_args(argv)
    _quiet_libraries()
    try:
        if args.command == "serve":
            return _serve(args)
        if args.command == "trace":
            return _trace(args)
        return _replay(args)
    except MaskscopeError as exc:
        located = {k: v for k, v in exc.to_dict().items() if k in {"line", "column", "pointer"}}
        where = ", ".join(f"{k} {v}" for k, v in located.items())
        print(f"error: {exc.message}{f' ({where})' if where else ''}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
