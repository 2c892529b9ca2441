"""Which keywords change the grammar: a JSON Schema converted again without each one.

Converting a schema to a grammar builds no token masks, so it takes well under a millisecond for
most schemas; the probe runs in a compile worker, where xgrammar's warnings are captured per
conversion and a runaway schema can be stopped. A keyword whose removal leaves the grammar text
identical is ignored by xgrammar; warnings that vanish with it were printed about it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from app.paths import split_pointer

__all__ = ["KeywordProbe", "ProbeResult", "without_keyword"]


@dataclass(frozen=True)
class KeywordProbe:
    """One keyword converted away.

    Attributes:
        pointer: JSON pointer of the keyword, e.g. ``/properties/tags/uniqueItems``.
        identical: the grammar without the keyword is the very same text.
        warnings: the lines xgrammar printed with the keyword that it does not print without it.
    """

    pointer: str
    identical: bool
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class ProbeResult:
    """The keywords probed, in the order asked, and whether the time bound cut the probe short.

    Attributes:
        probes: one entry per keyword probed (fewer than asked when cut short).
        warnings: what xgrammar printed converting the whole schema.
        cut_short: the time bound was reached before every keyword was probed.
        ms: wall time of the probe in the worker.
    """

    probes: tuple[KeywordProbe, ...]
    warnings: tuple[str, ...]
    cut_short: bool
    ms: float


def without_keyword(schema: Any, pointer: str) -> Any:
    """A deep copy of ``schema`` with the keyword at ``pointer`` removed.

    Raises:
        KeyError: the pointer does not name a keyword of an object in the schema.
    """
    parts = split_pointer(pointer)
    if not parts:
        raise KeyError("the empty pointer names no keyword")
    out = copy.deepcopy(schema)
    node = out
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if not isinstance(node, dict) or parts[-1] not in node:
        raise KeyError(pointer)
    del node[parts[-1]]
    return out
