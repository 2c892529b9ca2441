"""How ``make test`` spreads the tests over pytest-xdist workers (``-n 2 --dist loadgroup``).

A work unit is a test module (its module-scoped fixtures, some of which start servers and load
the model, are set up once, in one worker), or an ``xdist_group`` mark's name across modules
(every test on the session's vLLM servers goes to one worker). xdist's own ``loadgroup`` finds
the groups in node ids it rewrites, which pytest 9 no longer lets it do: the workers write the
groups to a file instead (``tests/conftest.py``), and this scheduler reads it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadGroupScheduling

__all__ = ["GroupScheduling", "group_of", "groups_file"]


def groups_file(shared_dir: Path) -> Path:
    """Where the workers write ``{node id: group}`` for the tests that carry a group."""
    return shared_dir / "groups.json"


def group_of(item: pytest.Item) -> str | None:
    """The name of the ``xdist_group`` mark on ``item`` (several: joined, as xdist does)."""
    names = {
        str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
        for mark in item.iter_markers("xdist_group")
    }
    return "_".join(sorted(names)) if names else None


class GroupScheduling(LoadGroupScheduling):  # type: ignore[misc]  # xdist is untyped here
    """``loadgroup`` with the groups read from the workers' file, and a module as the unit of
    every test without a group.

    Args:
        config: the controller's configuration.
        log: xdist's logger.
        shared_dir: the directory the workers write :func:`groups_file` to.
    """

    def __init__(self, config: pytest.Config, log: Any, shared_dir: Path) -> None:
        super().__init__(config, log)
        # The units go out in the workers' order (tests/conftest.py puts the remote ones
        # halfway, so that vLLM has started by then), not largest first.
        config.option.loadscopereorder = False
        self._shared_dir = shared_dir
        self._groups: dict[str, str] | None = None

    def _split_scope(self, nodeid: str) -> str:
        # Called once every worker has collected (and written the file).
        if self._groups is None:
            path = groups_file(self._shared_dir)
            self._groups = json.loads(path.read_text()) if path.exists() else {}
        group = self._groups.get(nodeid)
        return f"group:{group}" if group is not None else nodeid.split("::", 1)[0]
