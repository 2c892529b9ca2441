"""Every error Maskscope reports to a user, each carrying what is needed to fix the input.

The web layer maps these classes to HTTP status codes in one place; nothing else here knows HTTP.
"""

from __future__ import annotations

from typing import Any


class MaskscopeError(Exception):
    """Base class: a message for a person, a stable code for a program, and where it happened.

    Args:
        message: what is wrong, in words that name the offending value.
        line: 1-based line in the user's source, when known.
        column: 1-based column in the user's source, when known.
        pointer: JSON pointer (RFC 6901) into the user's JSON document, when known.
    """

    code = "error"

    def __init__(
        self,
        message: str,
        *,
        line: int | None = None,
        column: int | None = None,
        pointer: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column
        self.pointer = pointer

    def to_dict(self) -> dict[str, Any]:
        """The error as the API's ``error`` object, without the fields that are unknown."""
        out: dict[str, Any] = {"message": self.message, "code": self.code}
        for key in ("line", "column", "pointer"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MaskscopeError:
        """Rebuild an error sent across a process boundary by :meth:`to_dict`."""
        subclass = _BY_CODE.get(str(data.get("code")), cls)
        return subclass(
            str(data["message"]),
            line=data.get("line"),
            column=data.get("column"),
            pointer=data.get("pointer"),
        )


class GrammarError(MaskscopeError):
    """The schema, EBNF or regex does not parse or xgrammar refuses to compile it."""

    code = "grammar_invalid"


class GrammarTooComplex(GrammarError):
    """Compiling ran past its time limit or took its worker process down."""

    code = "grammar_too_complex"


class GrammarTooSlow(GrammarError):
    """Walking a text or a run through the grammar ran past the request's CPU-time budget
    (``MASKSCOPE_WALK_BUDGET_S``): the grammar compiles, but each token costs more as the text
    grows. The message says how far the walk got and what a token cost."""

    code = "grammar_too_slow"


class InvalidInput(MaskscopeError):
    """A well-formed request with a value the engine cannot use (a token id out of range...)."""

    code = "invalid_input"


class TokenRefused(MaskscopeError):
    """A forced token that the grammar's mask blocks at this step; nothing was changed."""

    code = "token_refused"


class SessionFinished(MaskscopeError):
    """A step asked of a session that has already stopped (terminated, eos, max_tokens)."""

    code = "session_finished"


class ModelLoadError(MaskscopeError):
    """The configured model could not be found or loaded."""

    code = "model_load_failed"


class SessionNotFound(MaskscopeError):
    """No session has this id."""

    code = "session_not_found"


class SessionGone(MaskscopeError):
    """The session expired or was evicted to make room; start a new one."""

    code = "session_gone"


class CapacityExceeded(MaskscopeError):
    """A cap is full (live sessions, a queue of waiting work); try again later."""

    code = "capacity_exceeded"


class RateLimited(CapacityExceeded):
    """A per-client rate or quota is used up (permalinks a minute, bytes stored); the answer
    says when to retry (``Retry-After``, whole seconds)."""

    code = "rate_limited"

    def __init__(self, message: str, *, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class CutShortByLoad(MaskscopeError):
    """Work bounded by what it does (documents built, tokens walked) hit its wall-clock safety
    stop first: the machine is busy, not the input at fault. Try again later."""

    code = "cut_short_by_load"


class RunInProgress(MaskscopeError):
    """An action that cannot interleave with a run streaming for this session."""

    code = "run_in_progress"


class NotReady(MaskscopeError):
    """The model is still loading (or failed to load)."""

    code = "not_ready"


class ShuttingDown(MaskscopeError):
    """The server is stopping (SIGTERM): it takes no new work; retry on another replica or
    once it is back."""

    code = "shutting_down"


class NoForwardEngine(MaskscopeError):
    """A session asked of a model known by its tokenizer only (``MASKSCOPE_TOKENIZERS``): it
    compiles and replays, but nothing here computes its next-token distribution."""

    code = "no_forward_engine"


class ModelNotConfigured(MaskscopeError):
    """A permalink names a model this server does not have."""

    code = "model_not_configured"


class RemoteEngineError(MaskscopeError):
    """A remote engine (a vLLM server) failed to answer a request; nothing was changed."""

    code = "engine_error"


class EngineUnreachable(RemoteEngineError):
    """The remote engine could not be reached: connection refused, reset, or a name that does
    not resolve."""

    code = "engine_unreachable"


class EngineTimeout(RemoteEngineError):
    """The remote engine did not answer within the configured time."""

    code = "engine_timeout"


class EngineError(RemoteEngineError):
    """The remote engine answered with an error (its own message is passed on) or with something
    that is not the answer vLLM gives."""

    code = "engine_error"


class SourceRefused(GrammarError):
    """A Pydantic source uses a construct the sandbox does not allow."""

    code = "source_refused"


class PydanticFailed(GrammarError):
    """The Pydantic source passed the check but pydantic (in the sandbox) raised, or the sandbox
    ended it (time, memory, output size)."""

    code = "pydantic_error"


class SandboxUnconfined(GrammarError):
    """Pydantic sources are refused: the sandbox runs below the containment level the operator
    allows (the kernel lacks Landlock or seccomp), so a source that escaped the static check
    could harm the server."""

    code = "sandbox_unconfined"


_BY_CODE: dict[str, type[MaskscopeError]] = {
    c.code: c
    for c in (
        GrammarError,
        GrammarTooComplex,
        GrammarTooSlow,
        CutShortByLoad,
        InvalidInput,
        TokenRefused,
        SessionFinished,
        SourceRefused,
        PydanticFailed,
        SandboxUnconfined,
    )
}


class TooLarge(MaskscopeError):
    """An input above a size limit; the message names the limit."""

    code = "too_large"


class SnapshotTooLarge(TooLarge):
    """A permalink snapshot above the size limit."""


class ReplayTooLong(TooLarge):
    """A text or token list longer than a replay may walk."""


class RequestEnded(MaskscopeError):
    """The client left before the answer was ready, and the work for it was stopped."""

    code = "request_ended"


class PermalinkNotFound(MaskscopeError):
    """No permalink has this id."""

    code = "permalink_not_found"


class ForbiddenOrigin(MaskscopeError):
    """A request this server refuses to answer: a Host it does not serve (DNS rebinding), a
    state-changing request from another site, or a page request without its CSRF token."""

    code = "forbidden_origin"


class WrongReplica(MaskscopeError):
    """A session id that names another replica (its ``{replica_id}.`` prefix): the session
    lives in that replica's memory, so the request must be routed there.

    Args:
        message: what happened, naming the holder.
        holder: the replica id the session belongs to.
    """

    code = "wrong_replica"

    def __init__(self, message: str, *, holder: str) -> None:
        super().__init__(message)
        self.holder = holder


class StoreUnavailable(MaskscopeError):
    """The permalink database cannot be reached (or is at a schema this code does not know)."""

    code = "store_unavailable"
