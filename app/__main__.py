"""Command line: ``python -m app serve|trace|replay|doctor|test`` (see ``python -m app --help``)."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app import vocabulary
from app.exceptions import MaskscopeError

if TYPE_CHECKING:
    from app.doctor import DoctorReport, PydanticSource
    from app.engine import AnyEngine, CompileOptions, GrammarSpec, MaskingLibrary, StepRecord
    from app.schematests import SchemaTestResult
    from app.settings import Settings

_KIND_BY_SUFFIX = {".json": "json_schema", ".py": "pydantic", ".ebnf": "ebnf", ".regex": "regex"}
_KINDS = tuple(kind.value for kind in vocabulary.SourceKind)
_BACKENDS = ("xgrammar", "vllm", "sglang", "llguidance", "openai_strict")
_ENGINES = tuple(library.value for library in vocabulary.MaskingLibrary)
_PRESETS = tuple(preset.value for preset in vocabulary.Preset)


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
    _compare_argument(trace)

    replay = commands.add_parser("replay", help="check a text against a grammar, no model")
    _grammar_arguments(replay)
    replay.add_argument("--text", required=True, help="the text to walk through the grammar")
    replay.add_argument("--json", action="store_true", help="print the replay as JSON")
    _compare_argument(replay)

    doctor = commands.add_parser(
        "doctor", help="is the schema enforced as written; what each serving stack does with it"
    )
    _grammar_arguments(doctor)
    doctor.add_argument(
        "--backend", action="append", choices=_BACKENDS, default=[],
        help="exit 1 when this stack refuses the schema or falls back (repeatable)",
    )  # fmt: skip
    doctor.add_argument("--seed", type=int, default=0, help="the witness search's seed")
    doctor.add_argument("--budget-ms", type=int, help="time the search may take (default 2000)")
    doctor.add_argument("--max-tokens", type=int, help="flag it when below the shortest document")
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")

    test = commands.add_parser("test", help="run a schema's unit tests; exit 1 on a failed one")
    _grammar_arguments(test)
    test.add_argument(
        "--tests", required=True, type=Path, help='JSON Lines: {"text", "expect"} a line'
    )
    test.add_argument("--json", action="store_true", help="JSON Lines: one result a line")
    return parser


def _grammar_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--schema", required=True, type=Path, help="schema or grammar file")
    parser.add_argument("--kind", choices=_KINDS, help="default: from the file's extension")
    parser.add_argument(
        "--preset", choices=_PRESETS, default=vocabulary.Preset.MASKSCOPE.value,
        help="the options a serving engine passes to xgrammar (default: maskscope)",
    )  # fmt: skip
    parser.add_argument(
        "--any-whitespace", action="store_true", help="allow any whitespace in JSON (slower)"
    )
    parser.add_argument("--no-strict", action="store_true", help="strict_mode=False")
    parser.add_argument("--indent", type=int, help="indentation of the JSON")
    parser.add_argument("--separators", nargs=2, metavar=("ITEM", "KEY"), help="e.g. ', ' ': '")
    parser.add_argument("--max-whitespace", type=int, help="max_whitespace_cnt")
    parser.add_argument("--root-model", help="Pydantic: the model to use (default: the last)")
    parser.add_argument(
        "--engine", choices=_ENGINES, default="xgrammar",
        help="the library that computes the mask (default: xgrammar)",
    )  # fmt: skip
    parser.add_argument(
        "--model", default="local",
        help="`local` (default), or a remote engine's id from MASKSCOPE_REMOTE_ENGINES: the model "
        "that runs, and the tokenizer the masks are computed with",
    )  # fmt: skip


def _compare_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--compare", choices=_ENGINES,
        help="compare mode: this engine follows the same tokens and its differences are shown",
    )  # fmt: skip


def _load_engine(args: argparse.Namespace) -> AnyEngine:
    """The engine ``--model`` names: the local model, or a remote engine of
    ``MASKSCOPE_REMOTE_ENGINES`` (checked once; no local model is loaded then)."""
    from app.engine import Engine
    from app.settings import LOCAL_MODEL_ID, Settings

    settings = Settings()
    if args.model == LOCAL_MODEL_ID:
        return Engine.load(settings)
    from app.engine.remote.engines import open_remote

    return open_remote(settings, args.model)


def _close(engine: AnyEngine) -> None:
    from app.engine.remote.model import RemoteModel

    engine.close()
    if isinstance(engine.model, RemoteModel):
        engine.model.close()


def _kind(args: argparse.Namespace) -> str:
    kind: str | None = args.kind or _KIND_BY_SUFFIX.get(args.schema.suffix)
    if kind is None:
        raise SystemExit(f"cannot tell the kind of {args.schema} from its extension: use --kind")
    return kind


def _options(args: argparse.Namespace) -> CompileOptions:
    """The preset's options with the ones given on the command line applied."""
    from app.engine import MaskingLibrary, presets

    overrides: dict[str, Any] = {}
    if args.any_whitespace:
        overrides["any_whitespace"] = True
    if args.no_strict:
        overrides["strict_mode"] = False
    if args.indent is not None:
        overrides["indent"] = args.indent
    if args.separators:
        overrides["separators"] = tuple(args.separators)
    if args.max_whitespace is not None:
        overrides["max_whitespace_cnt"] = args.max_whitespace
    return dataclasses.replace(presets(MaskingLibrary(args.engine))[args.preset], **overrides)


def _resolve(args: argparse.Namespace) -> tuple[GrammarSpec, PydanticSource | None]:
    """The grammar request; a Pydantic source also gives what the Doctor needs of it."""
    from app.engine import GrammarKind, GrammarSpec, MaskingLibrary

    kind = _kind(args)
    source = args.schema.read_text(encoding="utf-8")
    options = _options(args)
    library = MaskingLibrary(args.engine)
    if kind == "pydantic":
        from app.doctor import PydanticSource
        from app.sandbox.sandbox import Sandbox
        from app.settings import Settings

        sandbox = Sandbox.from_settings(Settings())
        derived = sandbox.schema(source, args.root_model)
        schema = json.dumps(derived.schema, indent=2)
        spec = GrammarSpec(GrammarKind.JSON_SCHEMA, schema, options, library)
        validate = functools.partial(sandbox.validate_many, source, args.root_model)
        return spec, PydanticSource(source, derived.root, validate)
    return GrammarSpec(GrammarKind(kind), source, options, library), None


def _spec(args: argparse.Namespace) -> GrammarSpec:
    return _resolve(args)[0]


def _compare(args: argparse.Namespace) -> MaskingLibrary | None:
    from app.engine import MaskingLibrary

    return MaskingLibrary(args.compare) if args.compare else None


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
        f"{_follower_note(record)}"
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


def _trace(args: argparse.Namespace) -> int:
    from app.engine import ChatMessage, SamplingParams, with_schema
    from app.settings import Settings

    spec = _spec(args)
    system = args.system or ""
    if args.schema_in_prompt:
        system = with_schema(system, spec.source)
    engine = _load_engine(args)
    try:
        messages = [ChatMessage("system", system)] if system else []
        messages.append(ChatMessage("user", args.prompt))
        session = engine.new_session(
            spec,
            messages=() if args.raw else messages,
            raw_prompt=args.prompt if args.raw else None,
            sampling=SamplingParams.create(args.temperature, args.top_p, args.seed),
            max_tokens=args.steps,
            compare=_compare(args),
        )
        for warning in session.grammar.warnings:
            print(f"{args.engine}: {warning}", file=sys.stderr)
        for option in session.grammar.not_carried:
            print(f"{args.engine}: {option} is not carried over", file=sys.stderr)
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
        _close(engine)
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


def _replay(args: argparse.Namespace) -> int:

    spec = _spec(args)
    engine = _load_engine(args)
    try:
        result = engine.replay(spec, text=args.text, compare=_compare(args))
    finally:
        _close(engine)
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
        if result.follower is not None:
            other = result.follower
            where = f" (refused at offset {other.rejection.offset})" if other.rejection else ""
            print(f"{other.engine}: accepted: {other.accepted}; complete: {other.complete}{where}")
    return 0 if result.accepted and result.complete else 1


def _doctor(args: argparse.Namespace) -> int:
    from app.doctor import DEFAULT_BUDGET_MS, Doctor, Status, Verdict

    spec, pydantic = _resolve(args)
    engine = _load_engine(args)
    try:
        report = Doctor.of(engine).examine(
            spec, seed=args.seed, budget_ms=args.budget_ms or DEFAULT_BUDGET_MS,
            pydantic=pydantic, max_tokens=args.max_tokens,
        )  # fmt: skip
    finally:
        _close(engine)
    print(json.dumps(report.to_dict(), indent=2) if args.json else _doctor_text(report))
    weak = any(k.status in (Status.IGNORED, Status.WEAKENED) for k in report.keywords)
    refused = any(
        row.backend in args.backend and row.verdict in (Verdict.REFUSES, Verdict.FALLS_BACK)
        for row in report.backends
    )
    return 1 if weak or refused else 0


def _doctor_text(report: DoctorReport) -> str:
    """The report for a terminal: flagged keywords, witnesses, one line per stack, costs."""
    lines: list[str] = []
    if report.keywords:
        counts = ", ".join(f"{n} {status}" for status, n in report.counts().items() if n)
        lines.append(f"keywords: {counts}")
        lines += [
            f"  {k.status.value:<9} {k.pointer}{f' (line {k.line})' if k.line else ''}: {k.detail}"
            for k in report.keywords
            if k.status.value != "enforced"
        ]
    if report.search:
        search = report.search
        lines.append(
            f"witnesses: {len(report.witnesses)} (seed {search.seed}, "
            f"{search.grammar_documents + search.schema_documents} documents, {search.ms:.0f} ms"
            f"{', cut short' if search.cut_short else ''})"
        )
    for witness in report.witnesses:
        where = f" at offset {witness.refusal.offset}" if witness.refusal else ""
        lines.append(f"  {witness.direction.value}{where}: {witness.text}")
        lines += [f"      {e.path}: {e.message}" for e in witness.errors]
    lines.append("backends:")
    for row in report.backends:
        lines.append(f"  {row.backend:<14} {row.verdict.value:<11} {row.rules_version}")
        lines += [
            f"      - {m.message}{f' ({m.pointer})' if m.pointer else ''}" for m in row.messages
        ]
    costs = report.costs
    spaced = costs.compile_ms_any_whitespace
    shortest = costs.shortest_document_tokens
    lines.append(
        f"costs: compile {costs.compile_ms:.1f} ms"
        f"{f' ({spaced:.1f} ms with any_whitespace)' if spaced is not None else ''}, "
        f"{costs.size_bytes:,} bytes, shortest document "
        f"{f'<= {shortest} tokens' if shortest is not None else 'not found'}"
        f"{' (above --max-tokens)' if costs.max_tokens_below_shortest else ''}, "
        f"unbounded whitespace: {'possible' if costs.unbounded_whitespace else 'no'}"
    )
    return "\n".join(lines)


def _test(args: argparse.Namespace) -> int:
    from app.schematests import read_tests, run_tests

    tests = read_tests(args.tests.read_text(encoding="utf-8"))
    spec, pydantic = _resolve(args)
    engine = _load_engine(args)
    try:
        validate = pydantic.validate_many if pydantic else None
        results = run_tests(engine, engine.compile(spec), tests, validate_many=validate)
    finally:
        _close(engine)
    failed = sum(not r.passed for r in results)
    disagree = sum(r.disagree for r in results)
    for index, result in enumerate(results):
        line = {"index": index, "text": result.test.text, **result.to_dict()}
        print(json.dumps(line, ensure_ascii=False) if args.json else _test_line(index, result))
    summary = {"passed": len(results) - failed, "failed": failed, "disagree": disagree}
    print(json.dumps(summary) if args.json else ", ".join(f"{n} {k}" for k, n in summary.items()))
    return 1 if failed else 0


def _test_line(index: int, result: SchemaTestResult) -> str:
    """One test for a terminal: verdict, expectation, grammar, schema, and the text judged."""
    grammar = result.grammar
    said = "accepts" if grammar.passes else "incomplete" if grammar.accepted else "refuses"
    if grammar.rejection:
        said += f" at offset {grammar.rejection.offset}"
    schema = "-" if result.schema is None else "valid" if result.schema.valid else "invalid"
    text = result.normalized if result.normalized is not None else result.test.text
    return (
        f"{'PASS' if result.passed else 'FAIL'} {index:>3}  expect {result.test.expect.value:<4}"
        f"  grammar {said:<22} schema {schema:<7}{'  DISAGREE' if result.disagree else ''}"
        f"  {json.dumps(text, ensure_ascii=False)[:80]}"
    )


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
    # The address bound is one of the hosts answered to by default (app/web/security.py).
    settings = settings.model_copy(update={"host": host, "port": port})
    print(f"Maskscope is starting: open http://{_url_host(host)}:{port}/", flush=True)
    warning = _hosts_warning(settings)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    # Our own access log carries request ids; uvicorn's would repeat every line without them.
    # proxy_headers=False: uvicorn would believe X-Forwarded-For from loopback; the app believes
    # MASKSCOPE_TRUSTED_PROXIES only.
    uvicorn.run(
        create_app(settings), host=host, port=port, log_level="info", access_log=False,
        proxy_headers=False,
    )  # fmt: skip
    return 0


def _url_host(host: str) -> str:
    """``host`` as written in a URL: a wildcard address as ``localhost``, IPv6 in brackets."""
    from app.web.security import is_wildcard

    if is_wildcard(host):
        return "localhost"
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _hosts_warning(settings: Settings) -> str | None:
    """What the operator must do when every address is bound but no host is named."""
    from app.web.security import is_wildcard

    if settings.allowed_hosts is not None or not is_wildcard(settings.host):
        return None
    return (
        f"warning: --host {settings.host} listens on every address, but MASKSCOPE_ALLOWED_HOSTS "
        "is not set: only localhost, 127.0.0.1 and [::1] are answered (other Host headers get "
        "403 forbidden_origin, a DNS rebinding defence). Set MASKSCOPE_ALLOWED_HOSTS to the "
        "names clients use, e.g. MASKSCOPE_ALLOWED_HOSTS=maskscope.example,10.0.0.5"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = _parser().parse_args(argv)
    _quiet_libraries()
    try:
        if args.command == "serve":
            return _serve(args)
        if args.command == "trace":
            return _trace(args)
        if args.command == "doctor":
            return _doctor(args)
        if args.command == "test":
            return _test(args)
        return _replay(args)
    except MaskscopeError as exc:
        located = {k: v for k, v in exc.to_dict().items() if k in {"line", "column", "pointer"}}
        where = ", ".join(f"{k} {v}" for k, v in located.items())
        print(f"error: {exc.message}{f' ({where})' if where else ''}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
