"""Command line: ``python -m app serve|trace|replay|doctor|test|check|store|stacks|diff|roundtrip``
(see ``--help``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pydantic import ValidationError

from app.cli import check, diff, doctor, replay, roundtrip, serve, stacks, store, test, trace
from app.cli.options import Command
from app.exceptions import MaskscopeError
from app.settings import Settings

__all__ = ["main", "parser", "settings_problems"]


def parser() -> argparse.ArgumentParser:
    """The argument parser: one subcommand per module, each bound to its ``run``."""
    root = argparse.ArgumentParser(prog="python -m app", description=__doc__)
    commands = root.add_subparsers(dest="command", required=True)
    for module in (serve, trace, replay, doctor, test, check, store, stacks, diff, roundtrip):
        command = commands.add_parser(module.NAME, help=module.HELP)
        module.add_arguments(command)
        command.set_defaults(run=module.run)
    return root


def settings_problems(invalid: ValidationError) -> str:
    """The settings that do not validate, one line each, named as environment variables."""
    lines = []
    for problem in invalid.errors(include_input=False, include_url=False):
        name = "_".join(str(part).upper() for part in problem["loc"] if isinstance(part, str))
        message = str(problem["msg"]).removeprefix("Value error, ")
        lines.append(f"error: MASKSCOPE_{name}: {message}" if name else f"error: {message}")
    heading = "error: the settings (MASKSCOPE_* variables) do not validate; nothing was started"
    return "\n".join([heading, *lines])


def _quiet_libraries() -> None:
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def main(argv: Sequence[str] | None = None, *, settings: Settings | None = None) -> int:
    """Run the command line; returns the exit status.

    Args:
        argv: the arguments (default: ``sys.argv[1:]``).
        settings: the settings every part of the run uses; built once from the environment
            when omitted.
    """
    args = parser().parse_args(argv)
    if settings is None:
        try:
            settings = Settings()
        except ValidationError as invalid:
            print(settings_problems(invalid), file=sys.stderr)
            return 2
    _quiet_libraries()
    try:
        run: Command = args.run
        return run(args, settings)
    except MaskscopeError as exc:
        located = {k: v for k, v in exc.to_dict().items() if k in {"line", "column", "pointer"}}
        where = ", ".join(f"{k} {v}" for k, v in located.items())
        print(f"error: {exc.message}{f' ({where})' if where else ''}", file=sys.stderr)
        return 2
