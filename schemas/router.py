"""A router: the action is one of two branches told apart by a literal tool_name."""

from typing import Annotated, Literal, Union

from pydantic import BaseModel, Field


class FetchUserFeatures(BaseModel):
    tool_name: Literal["fetch_user_features"]
    rationale: str = Field(..., max_length=160)
    user_id: str = Field(..., pattern=r"^u[0-9]{3,8}$")


class Respond(BaseModel):
    tool_name: Literal["respond"]
    content: str = Field(..., max_length=240)


class Router(BaseModel):
    """Route a support request: call a tool or answer directly."""

    action: Annotated[Union[FetchUserFeatures, Respond], Field(discriminator="tool_name")]
