"""The engine: grammars compiled by xgrammar, a real model stepped under the mask, all recorded.

Nothing here knows HTTP; the web layer and the CLI call :class:`Engine` and render its records.
"""

from app.engine.compiler import GrammarCompiler
from app.engine.engine import AnyEngine, Engine
from app.engine.forward.base import ModelIdentity
from app.engine.grammar import (
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
from app.engine.model import LoadedModel, load_model
from app.engine.prompt import ChatMessage, Prompt, render_prompt, with_schema
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
from app.engine.sampling import SamplingParams
from app.engine.session import Session, StopReason

__all__ = [
    "PRESETS",
    "ChatMessage",
    "CompileOptions",
    "CompileResult",
    "Disagreement",
    "AnyEngine",
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
