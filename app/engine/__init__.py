"""The engine: grammars compiled by xgrammar, a real model stepped under the mask, all recorded.

Nothing here knows HTTP; the web layer and the CLI call :class:`Engine` and render its records.
Its rooms, from the bottom: the shared leaves here (masks, tokens, records, JSON paths, the walk
budget), ``model/`` (loading, forward engines, prompts), ``grammars/`` (compilers and sources),
``masking/`` (the libraries' masks), ``stepper/`` (sessions and replay), ``engine.py`` (one
model with its compiler) and ``factories/`` (engines built from settings).

The names below are imported on first use (PEP 562), so that importing one room (the compile
worker's, say) never loads torch through this front door.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.engine.engine import AnyEngine, Engine
    from app.engine.grammars.compiler import GrammarCompiler
    from app.engine.grammars.spec import (
        PRESETS,
        CompileOptions,
        CompileResult,
        GrammarKind,
        GrammarSpec,
        LibraryName,
        MaskingLibrary,
        Preset,
        PresetName,
        SourceKind,
        SourceKindName,
        presets,
    )
    from app.engine.model.forward.base import ModelIdentity
    from app.engine.model.loading import LoadedModel, load_model
    from app.engine.model.prompt import ChatMessage, Prompt, render_prompt, with_schema
    from app.engine.model.sampling import SamplingParams
    from app.engine.records import (
        Disagreement,
        FollowerRecord,
        GrammarState,
        Probe,
        Rejection,
        ReplayResult,
        ReplayToken,
        ReplayVerdict,
        StepRecord,
        TopDifference,
        TopToken,
        Validation,
        ValidationError,
    )
    from app.engine.stepper.session import Session, StopReason

#: Each public name and the module that defines it.
_WHERE = {
    "AnyEngine": "app.engine.engine",
    "ChatMessage": "app.engine.model.prompt",
    "CompileOptions": "app.engine.grammars.spec",
    "CompileResult": "app.engine.grammars.spec",
    "Disagreement": "app.engine.records",
    "Engine": "app.engine.engine",
    "FollowerRecord": "app.engine.records",
    "GrammarCompiler": "app.engine.grammars.compiler",
    "GrammarKind": "app.engine.grammars.spec",
    "GrammarSpec": "app.engine.grammars.spec",
    "GrammarState": "app.engine.records",
    "LibraryName": "app.engine.grammars.spec",
    "LoadedModel": "app.engine.model.loading",
    "MaskingLibrary": "app.engine.grammars.spec",
    "ModelIdentity": "app.engine.model.forward.base",
    "PRESETS": "app.engine.grammars.spec",
    "Preset": "app.engine.grammars.spec",
    "PresetName": "app.engine.grammars.spec",
    "Probe": "app.engine.records",
    "Prompt": "app.engine.model.prompt",
    "Rejection": "app.engine.records",
    "ReplayResult": "app.engine.records",
    "ReplayToken": "app.engine.records",
    "ReplayVerdict": "app.engine.records",
    "SamplingParams": "app.engine.model.sampling",
    "Session": "app.engine.stepper.session",
    "SourceKind": "app.engine.grammars.spec",
    "SourceKindName": "app.engine.grammars.spec",
    "StepRecord": "app.engine.records",
    "StopReason": "app.engine.stepper.session",
    "TopDifference": "app.engine.records",
    "TopToken": "app.engine.records",
    "Validation": "app.engine.records",
    "ValidationError": "app.engine.records",
    "load_model": "app.engine.model.loading",
    "presets": "app.engine.grammars.spec",
    "render_prompt": "app.engine.model.prompt",
    "with_schema": "app.engine.model.prompt",
}

__all__ = [
    "AnyEngine",
    "ChatMessage",
    "CompileOptions",
    "CompileResult",
    "Disagreement",
    "Engine",
    "FollowerRecord",
    "GrammarCompiler",
    "GrammarKind",
    "GrammarSpec",
    "GrammarState",
    "LibraryName",
    "LoadedModel",
    "MaskingLibrary",
    "ModelIdentity",
    "PRESETS",
    "Preset",
    "PresetName",
    "Probe",
    "Prompt",
    "Rejection",
    "ReplayResult",
    "ReplayToken",
    "ReplayVerdict",
    "SamplingParams",
    "Session",
    "SourceKind",
    "SourceKindName",
    "StepRecord",
    "StopReason",
    "TopDifference",
    "TopToken",
    "Validation",
    "ValidationError",
    "load_model",
    "presets",
    "render_prompt",
    "with_schema",
]


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])
