"""What an export answers, and the pieces every snippet shares (header, constants)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from app.engine.grammars.spec import GrammarKind
from app.export.escape import Code, comment, py
from app.export.options import Layout, Reach, differences, layout
from app.export.request import ExportRequest

__all__ = ["Snippet", "constants", "header", "missing_options", "refused"]


@dataclass(frozen=True)
class Snippet:
    """The code for one target, and the options it cannot carry.

    Attributes:
        target: the target's name (``vllm``, ``curl_openai``...).
        language: ``python`` or ``bash``.
        code: the snippet.
        not_expressible: one sentence per option or input the target cannot express (also in
            a comment in ``code``).
        refused: the Doctor's message when the target's stack refuses the grammar (``code``
            is then that message as a comment: no request to send).
    """

    target: str
    language: str
    code: str
    not_expressible: tuple[str, ...]
    refused: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The ``/api/export`` answer."""
        return {
            "target": self.target,
            "language": self.language,
            "code": self.code,
            "not_expressible": list(self.not_expressible),
        }


def refused(target: str, stack: str, message: str) -> Snippet:
    """The snippet of a target whose stack refuses the grammar: the Doctor's row, no request."""
    language = "bash" if target.startswith("curl_") else "python"
    why = f"{stack} refuses this schema (the Doctor's {stack.lower()} row): {message}"
    text = (
        f"Maskscope export: no {stack} request is given. {why}\nChange the schema where the "
        "Doctor says, or use a target whose row does not refuse it (the other tabs)."
    )
    return Snippet(target, language, comment(text), (why,), refused=why)


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
