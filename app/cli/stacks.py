"""``python -m app stacks``: the serving stacks, each read in its own (warm) runner."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from app.settings import Settings

if TYPE_CHECKING:
    from app.engine.grammars.tools.vllm_builder import VllmBuilder

__all__ = ["HELP", "NAME", "add_arguments", "run"]

NAME = "stacks"
HELP = "list the serving stacks (MASKSCOPE_STACKS): versions, forward, available, reason"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--json``: one JSON list, as ``GET /api/stacks`` answers."""
    parser.add_argument("--json", action="store_true", help="print the list as JSON")


def run(args: argparse.Namespace, settings: Settings) -> int:
    """List the stacks; the runners it starts stay warm for the next call (their idle time is
    MASKSCOPE_STACK_RUNNER_IDLE_S). Exit 0 when every stack is available, 1 otherwise."""
    import dataclasses

    from app.engine.stacks import runner, stack_infos

    infos = stack_infos(settings)
    if args.json:
        rows = [dataclasses.asdict(info) for info in infos]
        for row in rows[1:]:  # each vLLM stack's runner, for whoever checks it is reused
            row["runner"] = _runner(runner(settings, row["id"]))
        print(json.dumps(rows))
    else:
        for info in infos:
            versions = " ".join(f"{k} {v}" for k, v in info.versions.items())
            state = "available" if info.available else f"unavailable: {info.reason}"
            forward = ", serves a model" if info.forward else ""
            print(f"{info.id}: {versions or '-'}{forward}; {state}")
    return 0 if all(info.available for info in infos) else 1


def _runner(builder: VllmBuilder) -> dict[str, int | None]:
    return {"pid": builder.runner_pid(), "starts": builder.start_count()}
