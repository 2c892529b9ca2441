"""The upgrade diff's Doctor rows: what the Doctor finds of one stack's grammar and not of the
other's (``doctor_diff`` of ``POST /api/diff``).

Each side is a Doctor answer in the contract's JSON form (``POST /api/doctor``: ``findings``,
``keywords``, ``backends``), of the grammar that stack's backend compiles, or the reason it
could not be examined. What both sides find alike is left out: a finding is the same finding
when its cause, direction, keywords and pointers are (its count and example depend on the
search), a keyword row when its status is, a backend row when its verdict and messages are.
Nothing here runs the Doctor: the web layer runs it in its workers.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["DoctorChange", "Examined", "doctor_changes"]

#: A side: a Doctor answer (its JSON form), or why it could not be examined (``{"error":
#: {"code", "message"}}``).
Examined = Mapping[str, Any]
#: A row of a Doctor answer (a finding, a keyword row, a backend row).
Row = Mapping[str, Any]


@dataclass(frozen=True)
class DoctorChange:
    """One row of the Doctor that differs between the two stacks.

    Attributes:
        kind: ``finding`` (on one side only), ``keyword`` (another status), ``backend`` (another
            verdict or other messages) or ``examination`` (a side could not be examined).
        key: what identifies the row on both sides (a finding's ``cause``, ``direction``,
            ``keywords`` and ``pointers``; a keyword's ``pointer`` and ``keyword``; a backend's
            name; nothing for an examination).
        a: the row on stack A (None where A has none).
        b: the row on stack B (None where B has none).
    """

    kind: str
    key: Mapping[str, Any]
    a: Mapping[str, Any] | None
    b: Mapping[str, Any] | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: ``kind``, the key's fields, then ``a`` and ``b``."""
        return {"kind": self.kind, **self.key, "a": self.a, "b": self.b}


def doctor_changes(a: Examined, b: Examined) -> tuple[DoctorChange, ...]:
    """Every Doctor row that differs between side ``a`` and side ``b`` (findings, then keyword
    rows, then backend rows, each in A's order then B's), or one ``examination`` change when a
    side could not be examined (its ``a`` or ``b`` the error, None for a side examined)."""
    if "error" in a or "error" in b:  # said even when both failed alike: [] means examined
        return (DoctorChange("examination", {}, _error(a), _error(b)),)
    findings = [
        DoctorChange("finding", key, _shown(one, _finding), _shown(other, _finding))
        for key, one, other in _paired(a, b, "findings", _finding_key, _same_finding)
    ]
    keywords = [
        DoctorChange("keyword", key, _shown(one, _keyword), _shown(other, _keyword))
        for key, one, other in _paired(a, b, "keywords", _keyword_key, _same_status)
    ]
    backends = [
        DoctorChange("backend", key, _backend(one, other), _backend(other, one))
        for key, one, other in _paired(a, b, "backends", _backend_key, _same_row)
    ]
    return (*findings, *keywords, *backends)


def _error(side: Examined) -> dict[str, Any] | None:
    error = side.get("error")
    return dict(error) if isinstance(error, Mapping) else None


def _paired(
    a: Examined,
    b: Examined,
    field: str,
    key_of: Callable[[Row], dict[str, Any]],
    alike: Callable[[Row, Row], bool],
) -> Iterator[tuple[dict[str, Any], Row | None, Row | None]]:
    """The rows of ``field`` paired by key, A's keys first: each pair that differs (a row on one
    side only, or two rows not ``alike``)."""
    rows_a, rows_b = _keyed(a.get(field) or (), key_of), _keyed(b.get(field) or (), key_of)
    for hashed in dict.fromkeys([*rows_a, *rows_b]):
        key, one = rows_a.get(hashed, ({}, None))
        other_key, other = rows_b.get(hashed, ({}, None))
        if one is None or other is None or not alike(one, other):
            yield key or other_key, one, other


def _keyed(
    rows: Iterable[Row], key_of: Callable[[Row], dict[str, Any]]
) -> dict[Hashable, tuple[dict[str, Any], Row]]:
    """Each row by its key (the first row of a key kept)."""
    out: dict[Hashable, tuple[dict[str, Any], Row]] = {}
    for row in rows:
        key = key_of(row)
        out.setdefault(_hashable(key), (key, row))
    return out


def _hashable(value: Any) -> Hashable:
    if isinstance(value, Mapping):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    hashable: Hashable = value
    return hashable


def _shown(row: Row | None, show: Callable[[Row], dict[str, Any]]) -> dict[str, Any] | None:
    return None if row is None else show(row)


def _same_finding(a: Row, b: Row) -> bool:
    return True  # its key is all of a finding both sides share (the count and example vary)


def _finding_key(row: Row) -> dict[str, Any]:
    return {
        "cause": row.get("cause"),
        "direction": row.get("direction"),
        "keywords": list(row.get("keywords") or ()),
        "pointers": list(row.get("pointers") or ()),
    }


def _finding(row: Row) -> dict[str, Any]:
    return {"count": row.get("count"), "example": row.get("example"), "note": row.get("note")}


def _keyword_key(row: Row) -> dict[str, Any]:
    return {"pointer": row.get("pointer"), "keyword": row.get("keyword")}


def _keyword(row: Row) -> dict[str, Any]:
    return {"status": row.get("status"), "detail": row.get("detail")}


def _same_status(a: Row, b: Row) -> bool:
    return bool(a.get("status") == b.get("status"))


def _backend_key(row: Row) -> dict[str, Any]:
    return {"backend": row.get("backend")}


def _messages(row: Row | None) -> list[Hashable]:
    return [_hashable(m) for m in (row or {}).get("messages") or ()]


def _same_row(a: Row, b: Row) -> bool:
    return bool(a.get("verdict") == b.get("verdict")) and _messages(a) == _messages(b)


def _backend(row: Row | None, other: Row | None) -> dict[str, Any] | None:
    """A backend row's verdict and the messages the other side's row does not say."""
    if row is None:
        return None
    said = set(_messages(other))
    only = [m for m in row.get("messages") or () if _hashable(m) not in said]
    return {"verdict": row.get("verdict"), "messages": only}
