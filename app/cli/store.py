"""``python -m app store copy``: copy the permalinks of one store into another (SQLite into a
team's PostgreSQL), keeping every id and creation time, so every link keeps working."""

from __future__ import annotations

import argparse
import sys
from collections import Counter

from app.exceptions import InvalidInput
from app.settings import Settings
from app.store.base import Added, StoredRow, canonical_id
from app.store.urls import open_store

__all__ = ["HELP", "NAME", "add_arguments", "run"]

NAME = "store"
HELP = "manage the permalink store: copy one into another"
_BATCH = 500


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``store``'s action and flags."""
    parser.add_argument("action", choices=["copy"], help="copy: every snapshot of --from to --to")
    parser.add_argument(
        "--from",
        dest="source",
        metavar="URL",
        help="the store to read (default: this server's, MASKSCOPE_DB_URL or MASKSCOPE_DB_PATH)",
    )
    parser.add_argument(
        "--to",
        dest="target",
        metavar="URL",
        required=True,
        help="the store to write, e.g. postgresql://user:password@host/db (migrated first)",
    )


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Copy every snapshot; exit 1 when one was left out (another content under its id there,
    or an id that does not hash its content)."""
    source_url = args.source or settings.store_url
    if source_url == args.target:
        raise InvalidInput(f"--from and --to name the same store ({source_url})")
    source = open_store(source_url)
    target = open_store(args.target)
    counts: Counter[str] = Counter()
    try:
        batch: list[StoredRow] = []
        for row in source.rows(batch=_BATCH):
            if row.id != canonical_id(row.content, len(row.id)):
                print(f"left out {row.id}: its id does not hash its content", file=sys.stderr)
                counts["damaged"] += 1
                continue
            batch.append(row)
            if len(batch) == _BATCH:
                _add(target.add_rows(batch), batch, counts)
                batch = []
        if batch:
            _add(target.add_rows(batch), batch, counts)
    finally:
        source.close()
        target.close()
    print(
        f"copied {counts[Added.NEW.value]} snapshots from {source.where} to {target.where}; "
        f"{counts[Added.SAME.value]} were there already, {counts[Added.CONFLICT.value]} "
        f"conflicted, {counts['damaged']} damaged"
    )
    return 1 if counts[Added.CONFLICT.value] or counts["damaged"] else 0


def _add(outcomes: list[Added], batch: list[StoredRow], counts: Counter[str]) -> None:
    for outcome, row in zip(outcomes, batch, strict=True):
        counts[outcome.value] += 1
        if outcome is Added.CONFLICT:
            print(f"left out {row.id}: the target holds other content under it", file=sys.stderr)
