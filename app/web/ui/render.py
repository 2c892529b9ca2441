"""Jinja filters the templates use to show records: tokens made visible, heat, bytes, kinds."""

from __future__ import annotations

import base64
from typing import Literal

from jinja2 import Environment

from app.engine import MaskingLibrary, Preset, SourceKind, StepRecord
from app.engine.mask_summary import CLASS_LABELS
from app.web.middleware.rootpath import url

__all__ = ["ChipKind", "chip_kind", "install"]

ChipKind = Literal["forced", "changed", "free"]

_VISIBLE = str.maketrans({" ": "·", "\n": "↵", "\t": "⇥", "\r": "␍"})


def visible(text: str) -> str:
    """A token's text with whitespace made visible (space ·, newline ↵, tab ⇥)."""
    return text.translate(_VISIBLE) if text else "∅"


def b64(data: bytes) -> str:
    """Base64 of raw bytes."""
    return base64.b64encode(data).decode("ascii")


def pct(value: float, digits: int = 1) -> str:
    """A probability as a percentage."""
    return f"{100 * value:.{digits}f}%"


def hexbytes(data: bytes) -> str:
    """Raw bytes as hex pairs."""
    return " ".join(f"{b:02x}" for b in data)


def chip_kind(step: StepRecord) -> ChipKind:
    """What kind of decision a step was, for its chip's colour.

    ``forced``: the grammar left no choice of text (one allowed token, or the token lies inside
    the jump-forward string). ``changed``: the mask changed the model's mind (its most probable
    raw token was blocked). ``free``: the model's own top choice was allowed.
    """
    text = step.token_text
    if step.allowed_count == 1 or (text and step.jump_forward.startswith(text)):
        return "forced"
    if step.top and not step.top[0].allowed:
        return "changed"
    return "free"


def install(env: Environment) -> None:
    """Register the filters, the names every form lists, ``token_classes`` (the records'
    allowed-token classes, key -> the inspector's words, in their order) and ``root_url(path)``
    (a path under the request's root path: :mod:`app.web.middleware.rootpath`) on a Jinja
    environment."""
    env.filters.update(visible=visible, b64=b64, pct=pct, hexbytes=hexbytes, chip_kind=chip_kind)
    env.globals.update(
        root_url=url,
        source_kinds={kind.value: kind.label for kind in SourceKind if kind.on_page},
        preset_labels={preset.value: preset.label for preset in Preset},
        libraries=[library.value for library in MaskingLibrary],
        token_classes=dict(CLASS_LABELS),
    )
