"""What several commands share: the grammar flags (a schema file, the compile options, --engine,
--model), the grammar request they describe, and the engine --model names."""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app import vocabulary
from app.settings import Settings

if TYPE_CHECKING:
    from app.doctor import PydanticSource
    from app.engine import AnyEngine, GrammarSpec, MaskingLibrary, Validation
    from app.engine.grammars.request import DerivedRequest

__all__ = [
    "Command",
    "GrammarRequest",
    "add_compare_argument",
    "add_grammar_arguments",
    "compare_library",
    "grammar_request",
    "kind_of",
    "load_engine",
]

#: A command's body: the parsed arguments and the run's settings in, the exit status out.
Command = Callable[[argparse.Namespace, Settings], int]

KIND_BY_SUFFIX = {".json": "json_schema", ".py": "pydantic", ".ebnf": "ebnf", ".regex": "regex"}
KINDS = tuple(kind.value for kind in vocabulary.SourceKind)
PRESETS = tuple(preset.value for preset in vocabulary.Preset)
ENGINES = tuple(library.value for library in vocabulary.MaskingLibrary)
REASONING_MODES = tuple(mode.value for mode in vocabulary.ReasoningMode)


def add_grammar_arguments(parser: argparse.ArgumentParser) -> None:
    """The schema file, its kind, the compile options the page has, ``--engine`` and
    ``--model``."""
    parser.add_argument("--schema", required=True, type=Path, help="schema or grammar file")
    parser.add_argument(
        "--kind", choices=KINDS,
        help="default: from the file's extension (a structural tag's, a tools source's or a "
        "pasted request's .json needs --kind structural_tag, tools or request: they share the "
        "extension with a schema)",
    )  # fmt: skip
    parser.add_argument(
        "--preset", choices=PRESETS, default=vocabulary.Preset.MASKSCOPE.value,
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
        "--engine", choices=ENGINES, default="xgrammar",
        help="the library that computes the mask (default: xgrammar)",
    )  # fmt: skip
    parser.add_argument(
        "--model", default="local",
        help="`local` (default), a remote engine's id from MASKSCOPE_REMOTE_ENGINES, or a "
        "tokenizer-only model's from MASKSCOPE_TOKENIZERS (deepseek-v4, qwen3.6 by default): the "
        "model that runs, and the tokenizer the masks are computed with",
    )  # fmt: skip


def add_compare_argument(parser: argparse.ArgumentParser) -> None:
    """``--compare``: a second masking library following the same tokens."""
    parser.add_argument(
        "--compare", choices=ENGINES,
        help="compare mode: this engine follows the same tokens and its differences are shown",
    )  # fmt: skip


def add_reasoning_argument(parser: argparse.ArgumentParser) -> None:
    """``--reasoning``: what the serving stack does while the model reasons."""
    parser.add_argument(
        "--reasoning", choices=REASONING_MODES, default=vocabulary.ReasoningMode.NONE.value,
        help="what the serving stack does while the model reasons: none (the grammar from token "
        "0), mask_after_end (no mask until the reasoning's end marker: vLLM's default with a "
        "reasoning parser), mask_everywhere",
    )  # fmt: skip


def kind_of(args: argparse.Namespace) -> str:
    """The grammar kind: ``--kind``, else the schema file's extension.

    Raises:
        SystemExit: neither tells it.
    """
    kind: str | None = args.kind or KIND_BY_SUFFIX.get(args.schema.suffix)
    if kind is None:
        raise SystemExit(f"cannot tell the kind of {args.schema} from its extension: use --kind")
    return kind


@dataclass(frozen=True)
class GrammarRequest:
    """The grammar flags made ready for the engine; a Pydantic source through the sandbox.

    Attributes:
        spec: what the engine compiles (a Pydantic source as its derived JSON Schema).
        pydantic: what the Doctor and the tests need of a Pydantic source (None for others).
        validate: validates one text with the Pydantic model itself (None for others).
        request: what the stack derived from a pasted request (None for others).
    """

    spec: GrammarSpec
    pydantic: PydanticSource | None = None
    validate: Callable[[str], Validation] | None = None
    request: DerivedRequest | None = None


def grammar_request(
    args: argparse.Namespace, settings: Settings, engine: AnyEngine | None = None
) -> GrammarRequest:
    """The grammar request the flags describe, built by the API's request models (a pasted
    request derived on ``engine``'s tokenizer: the ``--model``'s, loaded for it when not given).

    The models are constructed without their validation: their caps (an indent of at most 16,
    a 256 KiB source, ...) guard a shared server, and the command line, run by the operator on
    their own files, has never applied them.
    """
    from app.web.schemas.bodies import GrammarIn, OptionsIn

    kind = kind_of(args)
    source = args.schema.read_text(encoding="utf-8")
    grammar = GrammarIn.model_construct(
        kind=kind, source=source, options=OptionsIn.model_construct(**_options(args)),
        engine=args.engine,
    )  # fmt: skip
    if kind == "tools":
        return GrammarRequest(grammar.to_spec(_tools_source(source, settings)))
    if kind == "request":
        pasted = _derived(source, args, settings, engine)
        return GrammarRequest(grammar.to_spec(request=pasted), request=pasted)
    if kind != "pydantic":
        return GrammarRequest(grammar.to_spec())
    grammar.options.effective(args.engine)  # bad options are reported before the sandbox runs
    from app.doctor import PydanticSource
    from app.sandbox.sandbox import Sandbox

    sandbox = Sandbox.from_settings(settings)
    derived = sandbox.schema(source, args.root_model)
    spec = grammar.to_spec(json.dumps(derived.schema, indent=2))
    validate_many = functools.partial(sandbox.validate_many, source, args.root_model)
    validate = functools.partial(sandbox.validate, source, args.root_model)
    return GrammarRequest(spec, PydanticSource(source, derived.root, validate_many), validate)


def _derived(
    source: str, args: argparse.Namespace, settings: Settings, engine: AnyEngine | None
) -> DerivedRequest:
    """A request source as ``--stack`` (else the default vLLM stack) derives it on the
    ``--model``'s tokenizer (``engine``'s, or one loaded for the derivation alone)."""
    from app.engine.grammars.request import parse_request
    from app.engine.grammars.tools.vllm_builder import VllmBuilder
    from app.engine.model.chat_templates import server_template
    from app.engine.stacks import runner

    parsed = parse_request(source)
    stack = getattr(args, "stack", "maskscope")
    builder = VllmBuilder(settings) if stack == "maskscope" else runner(settings, stack)
    loaded = engine if engine is not None else load_engine(args, settings)
    try:
        shipped = getattr(getattr(loaded.model, "spec", None), "tokenizer", None)
        template = server_template(loaded.model.tokens, shipped=shipped)
        return builder.derive(parsed, loaded.tools.tokenizer, template)
    finally:
        if engine is None:
            loaded.close()


def _tools_source(source: str, settings: Settings) -> str:
    """A tools source with each ``$model`` derived by the sandbox, all in one run, and its
    errors placed as the server places them."""
    from app.engine.grammars.tools.request import parse_tools
    from app.exceptions import GrammarError

    parsed = parse_tools(source)
    if not parsed.models:
        return source
    from app.sandbox.sandbox import Sandbox

    assert parsed.pydantic is not None
    sandbox = Sandbox.from_settings(settings)
    try:
        derived = sandbox.schemas(parsed.pydantic, [ref.name for ref in parsed.models])
    except GrammarError as error:  # the source itself failed
        raise parsed.model_error(error, ["pydantic"]) from None
    return parsed.with_models(
        {n: d if isinstance(d, GrammarError) else d.schema for n, d in derived.items()}
    )


def _options(args: argparse.Namespace) -> dict[str, Any]:
    """The compile options given on the command line, as ``OptionsIn`` fields (None: the
    preset's)."""
    return {
        "preset": args.preset,
        "any_whitespace": True if args.any_whitespace else None,
        "strict_mode": False if args.no_strict else None,
        "indent": args.indent,
        "separators": tuple(args.separators) if args.separators else None,
        "max_whitespace_cnt": args.max_whitespace,
        "root_model": args.root_model,
    }


def compare_library(args: argparse.Namespace) -> MaskingLibrary | None:
    """The ``--compare`` library, or None without compare mode."""
    from app.engine import MaskingLibrary

    return MaskingLibrary(args.compare) if args.compare else None


def load_engine(args: argparse.Namespace, settings: Settings) -> AnyEngine:
    """The engine ``--model`` names: the local model, a tokenizer-only model of
    ``MASKSCOPE_TOKENIZERS`` (the shipped ones by default), or a remote engine of
    ``MASKSCOPE_REMOTE_ENGINES`` (checked once; no local model is loaded then)."""
    from app.engine import Engine
    from app.settings import LOCAL_MODEL_ID

    if args.model == LOCAL_MODEL_ID:
        return Engine.load(settings)
    from app.engine.factories.remote import open_remote
    from app.engine.factories.tokenizer_only import open_tokenizer

    tokenizer_only = open_tokenizer(settings, args.model)
    if tokenizer_only is not None:
        return tokenizer_only

    return open_remote(settings, args.model)
