"""The comments a snippet opens with: what it reproduces, server flags, what it cannot carry."""

from __future__ import annotations

from app.export.escape import one_line, sh
from app.export.options import SGLANG_VERSION, VLLM_FLAG, VLLM_VERSION, Reach
from app.export.request import ExportRequest

__all__ = ["options_line", "pydantic_notes", "sampling_notes", "sglang_notes", "vllm_notes"]

# Where the guided_* fields went: vllm-project/vllm#29326 removed them in v0.12.0; v0.11.2 was the
# release before it. 0.32.0 lists them in _REMOVED_GUIDED_FIELDS
# (vllm/entrypoints/serve/engine/protocol.py) and only logs a warning.
VLLM_LEGACY_VERSION = "0.11.2"


def _word(text: str) -> str:
    """One word of a command line a comment shows, to be copied into a shell."""
    return one_line(sh(text))


def options_line(req: ExportRequest) -> str:
    """The compile options Maskscope used, in words."""
    if not req.is_json:
        return f"Maskscope compiled this {req.kind.value} with xgrammar (no compile options apply)."
    opts = req.options.to_dict()
    shown = ", ".join(f"{k}={v!r}" for k, v in opts.items())
    return f"Maskscope compiled the JSON Schema with xgrammar ({shown}; preset {req.preset})."


def pydantic_notes(req: ExportRequest) -> list[str]:
    """The methods the sandbox removed from a Pydantic source, which no snippet carries."""
    if req.pydantic is None or not req.pydantic.stripped:
        return []
    return [
        "Maskscope removed these methods before running the source: "
        + ", ".join(map(one_line, req.pydantic.stripped))
        + ". This snippet leaves them out too: it carries only what the sandbox ran (and the "
        "JSON Schema pydantic derived from it), so nothing here checks what they checked."
    ]


def sampling_notes(req: ExportRequest, stack: str, seed_note: str) -> list[str]:
    """What the seed means on ``stack`` (greedy needs no note)."""
    if req.sampling.greedy:
        return []
    if req.sampling.seed is None:
        return ["No seed was fixed: every run draws differently."]
    return [f"The seed makes {stack} runs repeatable, not equal to Maskscope's tokens: {seed_note}"]


def vllm_notes(req: ExportRequest, reach: Reach, *, legacy: bool) -> list[str]:
    """vLLM: the version, the server flags, the backend it picks."""
    notes = []
    if legacy:
        notes.append(
            f"guided_* is the old vLLM request form: vLLM {VLLM_LEGACY_VERSION} is the last "
            "version that honours it (vllm-project/vllm#29326 removed it in 0.12.0). "
            f"vLLM {VLLM_VERSION} accepts it and IGNORES it (a warning in the server log only): "
            "the output is not constrained. Use the vllm target for newer servers."
        )
    else:
        notes.append(f"vLLM {VLLM_VERSION}: structured_outputs (StructuredOutputsParams).")
    if req.vllm_fallback:
        return [*notes, *_vllm_fallback_notes(req, reach)]
    serve = ["vllm serve", _word(req.model), *reach.flags]
    notes.append("Serve the model with:\n$ " + " ".join(serve))
    if reach.flags:
        notes.append(
            "The request field structured_outputs.disable_any_whitespace exists but vLLM "
            f"{VLLM_VERSION}'s xgrammar backend reads only the server flag."
        )
    notes.append(
        f"vLLM picks the grammar backend per server ({VLLM_FLAG}.backend, default auto), not per "
        "request."
    )
    if req.is_json and req.preset == "vllm" and not reach.flags:
        notes.append(
            "The vllm preset is this default: auto hands the schema to xgrammar with "
            f"any_whitespace=True, unless its pre-check finds a keyword xgrammar lacks; start with "
            f"{VLLM_FLAG}.backend xgrammar to be sure the mask is the one Maskscope showed."
        )
    return notes


def _vllm_fallback_notes(req: ExportRequest, reach: Reach) -> list[str]:
    """A schema vLLM's xgrammar pre-check refuses: never recommend the backend that refuses it;
    recommend guidance when it compiles the schema, else say plainly that no backend serves it."""
    assert req.vllm_fallback is not None
    why = (
        f"For this schema vLLM does not use xgrammar ({one_line(req.vllm_fallback)}): with "
        f"{VLLM_FLAG}.backend xgrammar it refuses the request (HTTP 400)"
    )
    # The whitespace flag is read by the guidance backend too; the backend flag is replaced.
    others = [f for f in reach.flags if not f.startswith(f"{VLLM_FLAG}.backend ")]
    if req.vllm_outlines:
        serve = ["vllm serve", _word(req.model), *others]
        return [
            "Serve the model with (backend auto):\n$ " + " ".join(serve),
            f"{why}, and patternProperties rules out guidance: auto falls back to outlines, "
            "which serves the request with its own mask. Maskscope does not reproduce "
            "outlines: this is not the mask Maskscope showed.",
        ]
    if req.vllm_guidance_error:
        # never a stack the Doctor says refuses the schema too (issue 45, B7)
        elsewhere = "use xgrammar locally"
        if req.refusal("sglang") is None:
            elsewhere = "serve it with SGLang or " + elsewhere
        return [
            f"No vLLM {VLLM_VERSION} server serves this request: no serve command is given. "
            f"{why}; auto falls back to guidance (llguidance), which refuses it too (HTTP 400: "
            f"{one_line(req.vllm_guidance_error)}). Change the schema (the Doctor's vllm row "
            f"says where), or {elsewhere} (the other tabs).",
        ]
    serve = ["vllm serve", _word(req.model), f"{VLLM_FLAG}.backend guidance", *others]
    return [
        "Serve the model with:\n$ " + " ".join(serve),
        f"{why}; the guidance backend (llguidance), which auto falls back to, serves it. Its "
        "mask is llguidance's, not the xgrammar mask Maskscope showed: pick the engine "
        "llguidance in Maskscope to see that one.",
    ]


def sglang_notes(req: ExportRequest, reach: Reach) -> list[str]:
    """SGLang: the version and its server flags."""
    launch = ["python -m sglang.launch_server --model-path", _word(req.model), *reach.flags]
    return [
        f"SGLang {SGLANG_VERSION}, grammar backend xgrammar (its default, --grammar-backend).",
        "Serve the model with:\n$ " + " ".join(launch),
    ]
