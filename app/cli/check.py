"""``python -m app check PATH...``: a suite's sources checked against stacks and engines, for CI;
``check merge REPORT...`` joins the JSON reports of ``--shard`` runs. Exit 0 clean, 1 a finding
at a failing level, 2 a usage error."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app import vocabulary
from app.settings import Settings

if TYPE_CHECKING:
    from app.suite import SuiteReport
    from app.suite.config import SuiteConfig

__all__ = ["FORMATS", "HELP", "LEVELS", "NAME", "add_arguments", "run"]

NAME = "check"
HELP = "check a whole suite of sources, for CI (`check merge`: join shards)"

FORMATS = ("text", "json", "junit", "sarif", "github")
LEVELS = ("compile_error", "ignored", "weakened", "over_restricted", "unconstrained",
          "test_failed", "slow_compile")  # fmt: skip
ENGINES = ("xgrammar", "llguidance")
PRESETS = tuple(preset.value for preset in vocabulary.Preset)
DEFAULT_CACHE = ".maskscope-cache"
DEFAULT_BASELINE = "maskscope-baseline.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``check``'s flags."""
    parser.add_argument(
        "paths", nargs="*", metavar="PATH",
        help="directories, globs, files or JSONL suites (default: the config's paths); "
        "`check merge REPORT...` joins --format json reports of shards",
    )  # fmt: skip
    parser.add_argument(
        "--stack", action="append",
        help="serving stack (repeatable): maskscope (default) or a vLLM release of "
        "`python -m app stacks` (vllm-0.32.0, vllm-0.34.0)",
    )  # fmt: skip
    parser.add_argument("--engine", action="append", choices=ENGINES, help="repeatable")
    parser.add_argument(
        "--fail-on", action="append", choices=LEVELS,
        help="a level that fails the run (repeatable; default: compile_error, ignored, "
        "weakened, unconstrained, test_failed)",
    )  # fmt: skip
    parser.add_argument("--baseline", type=Path, help="accept the findings this file holds")
    parser.add_argument(
        "--write-baseline", action="store_true",
        help=f"write every finding to the baseline (--baseline, default {DEFAULT_BASELINE})",
    )  # fmt: skip
    parser.add_argument("--format", choices=FORMATS, default="text")
    parser.add_argument("--output", type=Path, help="write the report here (default: stdout)")
    parser.add_argument("--shard", help="I/N: check only the I-th of N shards (a CI matrix)")
    parser.add_argument("--jobs", type=int, help="sources checked at once (default 1)")
    parser.add_argument("--config", type=Path, help="a maskscope.toml (default: ./maskscope.toml "
                        "or [tool.maskscope] of ./pyproject.toml)")  # fmt: skip
    parser.add_argument("--cache-dir", type=Path, help=f"default {DEFAULT_CACHE}")
    parser.add_argument("--no-cache", action="store_true", help="neither read nor write the cache")
    parser.add_argument("--slow-compile-ms", type=float, help="slow_compile at or above this")
    parser.add_argument("--preset", choices=PRESETS, help="the compile options' preset (default "
                        "maskscope)")  # fmt: skip
    parser.add_argument("--model", help="local (default) or a tokenizer-only model's id")
    parser.add_argument("--seed", type=int, help="the Doctor's witness search's seed (default 0)")
    parser.add_argument("--budget-ms", type=int, help="the Doctor's safety stop per part")


def _config(args: argparse.Namespace) -> SuiteConfig:
    from app.suite.config import SuiteConfig, find_config, load_config, read_config

    if args.config is not None:
        return read_config(args.config)
    found = find_config(Path.cwd())
    return load_config(*found) if found else SuiteConfig()


def _stacks(args: argparse.Namespace, config: SuiteConfig, settings: Settings) -> tuple[str, ...]:
    """The stacks to check against: ``maskscope`` and the configured vLLM stacks
    (``MASKSCOPE_STACKS``), each available (its runner started, and left warm).

    Raises:
        InvalidInput: an unknown stack, or one that is unavailable (the reason ``python -m app
            stacks`` gives).
    """
    from app.engine.stacks import MASKSCOPE, configured, runner, stack_infos
    from app.exceptions import InvalidInput, MaskscopeError

    stacks = tuple(dict.fromkeys(args.stack or config.stacks or (MASKSCOPE,)))
    known = configured(settings)
    unknown = [s for s in stacks if s != MASKSCOPE and s not in known]
    if unknown:
        names = ", ".join([MASKSCOPE, *known])
        raise InvalidInput(f"--stack {unknown[0]}: unknown stack (one of {names})")
    for stack in stacks:
        if stack == MASKSCOPE:
            continue
        try:
            runner(settings, stack).versions()
        except MaskscopeError:
            infos = {info.id: info for info in stack_infos(settings)}
            reason = infos[stack].reason if stack in infos else None
            raise InvalidInput(f"--stack {stack}: unavailable: {reason}") from None
    return stacks


def _options(args: argparse.Namespace, config: SuiteConfig) -> Any:
    import dataclasses

    from app.doctor import DEFAULT_BUDGET_MS
    from app.engine import presets
    from app.exceptions import InvalidInput
    from app.suite import CheckOptions

    preset = args.preset or config.preset or "maskscope"
    if preset not in PRESETS:
        raise InvalidInput(f"{config.file}: preset {preset!r} is not one of {', '.join(PRESETS)}")
    try:
        dataclasses.replace(presets()[preset], **config.options)
    except (TypeError, ValueError) as error:
        raise InvalidInput(f"{config.file}: options: {error}") from None
    return CheckOptions(
        preset=preset, overrides=dict(config.options),
        model=args.model or config.model or "local",
        seed=args.seed if args.seed is not None else config.seed or 0,
        budget_ms=args.budget_ms or config.budget_ms or DEFAULT_BUDGET_MS,
    )  # fmt: skip


def _report(args: argparse.Namespace, settings: Settings, config: SuiteConfig) -> SuiteReport:
    from app.exceptions import InvalidInput
    from app.suite import Level, SuiteReport
    from app.suite.baseline import apply_baseline, read_baseline
    from app.suite.cache import Cache
    from app.suite.checker import Checker, with_slow_compiles
    from app.suite.config import DEFAULT_FAIL_ON
    from app.suite.discovery import discover
    from app.suite.shard import in_shard, parse_shard

    paths = args.paths or list(config.paths)
    if not paths:
        raise InvalidInput("check: give a PATH (or paths in maskscope.toml)")
    cache_dir = args.cache_dir or Path(config.cache_dir or DEFAULT_CACHE)
    sources = discover(paths, skip=(cache_dir,))
    shard = parse_shard(args.shard) if args.shard else None
    if shard is not None:
        sources = in_shard(sources, shard)
    options = _options(args, config)
    checker = Checker(
        settings, options, lambda: _engine(options.model, settings),
        cache=None if args.no_cache else Cache(cache_dir), jobs=args.jobs or config.jobs or 1,
    )  # fmt: skip
    try:
        engines = tuple(args.engine or config.engines or ("xgrammar",))
        cases = checker.check(sources, _stacks(args, config, settings), engines)
    finally:
        checker.close()
    slow = args.slow_compile_ms if args.slow_compile_ms is not None else config.slow_compile_ms
    cases = with_slow_compiles(cases, slow)
    baseline = args.baseline or (Path(config.baseline) if config.baseline else None)
    if baseline is not None and not args.write_baseline:
        cases = apply_baseline(cases, read_baseline(baseline))
    fail_on = tuple(Level(v) for v in args.fail_on) if args.fail_on else config.fail_on
    return SuiteReport(tuple(cases), fail_on or DEFAULT_FAIL_ON, shard)


def _engine(model: str, settings: Settings) -> Any:
    from app.cli.options import load_engine

    return load_engine(argparse.Namespace(model=model), settings)


def _merged(paths: list[str]) -> SuiteReport:
    from app.exceptions import InvalidInput
    from app.suite import SuiteReport
    from app.suite.shard import merge

    reports = []
    for path in paths:
        try:
            reports.append(SuiteReport.from_dict(json.loads(Path(path).read_text("utf-8"))))
        except OSError as error:
            raise InvalidInput(f"check merge: {path}: {error.strerror}") from None
        except (ValueError, KeyError, TypeError):
            raise InvalidInput(f"check merge: {path}: not a --format json report") from None
    return merge(reports)


def _formatted(report: SuiteReport, fmt: str, *, baseline: bool) -> str:
    from app.suite.output import github, junit, text
    from app.suite.sarif import sarif

    if fmt == "json":
        return json.dumps(report.to_dict(), indent=2, ensure_ascii=False)
    if fmt == "sarif":
        return json.dumps(sarif(report, baseline=baseline), indent=2, ensure_ascii=False)
    return {"junit": junit, "github": github, "text": text}[fmt](report)


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Check the suite (or merge shards' reports), print the report; exit 1 when a finding at a
    failing level is not in the baseline, else 0 (``--write-baseline``: 0 once written)."""
    if args.paths[:1] == ["merge"]:
        report = _merged(args.paths[1:])
        baseline = False
    else:
        config = _config(args)
        report = _report(args, settings, config)
        baseline = bool(args.baseline or config.baseline)
        if args.write_baseline:
            from app.suite.baseline import write_baseline

            where = args.baseline or Path(config.baseline or DEFAULT_BASELINE)
            count = write_baseline(where, list(report.cases))
            print(f"wrote {count} finding(s) to {where}", file=sys.stderr)
            return 0
    out = _formatted(report, args.format, baseline=baseline)
    if args.output is not None:
        args.output.write_text(out + "\n", encoding="utf-8")
    else:
        print(out)
    return report.exit_status()
