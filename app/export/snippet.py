"""What an export answers, and the pieces every snippet shares (header, constants)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from app.engine.grammar import GrammarKind
from app.export.escape import Code, comment, py
from app.export.options import Layout, Reach, differences, layout
from app.export.request import ExportRequest

__all__ = ["Snippet", "constants", "header", "missing_options"]


@dataclass(frozen=True)
class Snippet:
    """The code for one target, and the options it cannot carry.

    Attributes:
        target: the target's name (``vllm``, ``curl_openai``...).
        language: ``python`` or ``bash``.
        code: the snippet.
        not_expressible: one sentence per option or input the target cannot express (also in
            a comment in ``code``).
    """

    target: str
    language: str
    code: str
    not_expressible: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """The ``/api/export`` answer."""
        return {
            "target": self.target,
            "language": self.language,
            "code": self.code,
            "not_expressible": list(self.not_expressible),
        }


def missing_options(
    req: ExportRequest, reach: Callable[[Layout], Reach], stack: str
) -> tuple[Reach, list[str]]:
    """What ``stack`` produces for the request's options, and what it cannot reproduce."""
    if not req.is_json:
        return Reach(None), []
    wanted = layout(req.options)
    got = reach(wanted)
    return got, differences(wanted, got, stack)


def header(title: str, notes: Sequence[str], missing: Sequence[str]) -> Code:
    """The comment block a snippet opens with."""
    text = "\n".join([f"Maskscope export: {title}.", *notes])
    if missing:
        text += "\nNot expressible here, so the mask can differ from Maskscope's:"
        text += "".join(f"\n- {line}" for line in missing)
    return comment(text)


def constants(req: ExportRequest, *, with_schema: bool = True) -> list[tuple[Code, Code]]:
    """The grammar as a named constant: ``SCHEMA`` or ``TAG`` (Python literals), ``GRAMMAR`` or
    ``REGEX``."""
    if req.is_json:
        return [(Code("SCHEMA"), py(req.schema))] if with_schema else []
    if req.tag is not None:
        return [(Code("TAG"), py(req.tag))]
    if req.kind is GrammarKind.STRUCTURAL_TAG:  # a tools source whose builder built no tag
        return []
    name = "GRAMMAR" if req.kind.value == "ebnf" else "REGEX"
    return [(Code(name), py(req.source))]
