"""A risk assessment: two to four factors, each an explanation and a severity."""

from typing import Annotated, Literal

from annotated_types import MaxLen, MinLen
from pydantic import BaseModel, Field


class RiskFactor(BaseModel):
    explanation: str = Field(..., max_length=120)
    severity: Literal["low", "medium", "high"]


class RiskAssessment(BaseModel):
    """Assess the risks of a plan: two to four factors."""

    factors: Annotated[list[RiskFactor], MinLen(2), MaxLen(4)]
