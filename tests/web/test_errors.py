"""Engine errors map to the contract's status codes in one place."""

from __future__ import annotations

import pytest

from app.exceptions import EngineError, EngineTimeout, EngineUnreachable, MaskscopeError
from app.web.errors import status_of


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (EngineUnreachable("refused"), 502, "engine_unreachable"),
        (EngineTimeout("slow"), 504, "engine_timeout"),
        (EngineError("the server's 400"), 502, "engine_error"),
    ],
)
def test_remote_engine_errors(error: MaskscopeError, status: int, code: str) -> None:
    assert status_of(error) == status
    assert error.to_dict() == {"message": error.message, "code": code}
