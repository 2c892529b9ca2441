"""A deeply nested object: user.profile.settings.theme exercises the stack."""

from typing import Literal

from pydantic import BaseModel, Field


class Settings_(BaseModel):
    theme: Literal["dark", "light"]
    notifications: bool


class Profile(BaseModel):
    display_name: str = Field(..., max_length=40)
    settings: Settings_


class User(BaseModel):
    id: int = Field(..., ge=1)
    profile: Profile


class UserSettings(BaseModel):
    """A deeply nested object: user.profile.settings.theme exercises the stack."""

    user: User
