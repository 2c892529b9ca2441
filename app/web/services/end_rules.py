"""The end rules a walk applies: the body's own, and a pasted request's derived ones."""

from __future__ import annotations

from app.engine.grammars.request import DerivedRequest
from app.engine.stepper.stops import EndRules
from app.web.schemas.bodies import EndIn

__all__ = ["end_rules_of"]


def end_rules_of(body: EndIn, request: DerivedRequest | None) -> EndRules | None:
    """The end rules a walk applies: the body's, and a pasted request's derived ``min_tokens``,
    ``stop_token_ids`` and ``stop`` where the body does not give the field itself (a field the
    body gives wins, even an empty one); None when none is set."""
    if request is None:
        return body.end_rules()
    given = body.model_fields_set
    rules = EndRules(
        body.min_tokens if "min_tokens" in given else request.min_tokens,
        tuple(body.stop_token_ids if "stop_token_ids" in given else request.stop_token_ids),
        tuple(body.stop if "stop" in given else request.stop),
    )
    return rules if rules.active else None
