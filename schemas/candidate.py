"""A candidate evaluation: a summary, an integer rating and a recommendation."""

from enum import Enum
from typing import Annotated

from annotated_types import Ge, Le
from pydantic import BaseModel, Field


class Recommendation(str, Enum):
    hire = "hire"
    reject = "reject"
    hold = "hold"


class CandidateEvaluation(BaseModel):
    """Evaluate a job candidate."""

    summary: str = Field(..., max_length=200)
    rating: Annotated[int, Ge(1), Le(10)]
    recommendation: Recommendation
