"""Schema-guided reasoning cascade: analyse churn and finances before deciding a discount."""

from typing import Annotated

from annotated_types import Ge, Le
from pydantic import BaseModel, Field


class PricingDecision(BaseModel):
    """Schema-guided reasoning cascade: analyse churn and finances before deciding a discount."""

    churn_analysis: str = Field(..., description="Why the customer might leave.", max_length=160)
    financial_analysis: str = Field(
        ..., description="What the account is worth to us.", max_length=160
    )
    margin_math: str = Field(
        ..., description="The arithmetic on margin after a discount.", max_length=120
    )
    max_discount_percent: Annotated[float, Ge(0), Le(30)] = Field(
        ..., description="Largest discount we can offer, in percent."
    )
    offer_code: str = Field(
        ..., pattern=r"^[A-Z]{4}[0-9]{2}$", description="Four capitals and two digits."
    )
    customer_message: str = Field(..., description="The message to the customer.", max_length=200)
