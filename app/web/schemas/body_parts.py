"""The parts request bodies are made of: strict models, checked text, ids, and the small bodies
several requests hold (session actions, schema unit tests)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from app.caps import MAX_STEP_COUNT, MAX_TESTS, MAX_TEXT_BYTES, MAX_TOKEN_ID, MAX_TOKENS
from app.engine import LibraryName
from app.exceptions import TooLarge
from app.schematests import Expect, SchemaTest

__all__ = [
    "ActionIn",
    "Compare",
    "CountIn",
    "ForceIn",
    "ModelId",
    "OpenPermalinkIn",
    "SchemaTestIn",
    "SchemaTests",
    "Separator",
    "Strict",
    "Text",
    "TokenId",
    "check_test_sizes",
    "valid_unicode",
]


def valid_unicode(value: str) -> str:
    """``value``, refused when it holds a lone surrogate (it cannot be encoded in UTF-8)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"invalid unicode: a lone surrogate at character {exc.start}") from None
    return value


Text = Annotated[str, AfterValidator(valid_unicode)]
Separator = Annotated[str, Field(max_length=8)]
TokenId = Annotated[int, Field(ge=0, le=MAX_TOKEN_ID)]
Library = LibraryName
Compare = Annotated[
    Library | None,
    Field(description="compare mode: this engine follows the same tokens (the other engine)"),
]


class Strict(BaseModel):
    """A request body that refuses unknown fields and non-finite numbers."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


#: The model a request runs on, or whose tokenizer its masks are computed with.
ModelId = Annotated[
    str,
    Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
        description="`local`, or a remote engine's id (GET /api/models): the tokenizer the "
        "masks are computed with, and for a session the model that runs",
    ),
]


class SchemaTestIn(Strict):
    """A schema unit test: a document and whether the grammar must pass or fail it."""

    text: Text = Field(
        json_schema_extra={"maxLength": MAX_TEXT_BYTES},
        description=f"at most {MAX_TEXT_BYTES} bytes in UTF-8 (413 beyond)",
    )
    expect: Literal["pass", "fail"]

    def to_test(self) -> SchemaTest:
        """The engine's test."""
        return SchemaTest(self.text, Expect(self.expect))


def check_test_sizes(tests: list[SchemaTestIn], *, at: str = "/tests") -> None:
    """Refuse a test text above :data:`MAX_TEXT_BYTES` (413, with its pointer)."""
    for index, test in enumerate(tests):
        size = len(test.text.encode("utf-8"))
        if size > MAX_TEXT_BYTES:
            raise TooLarge(
                f"test {index} is {size} bytes; a test may hold {MAX_TEXT_BYTES}",
                pointer=f"{at}/{index}/text",
            )


SchemaTests = Annotated[list[SchemaTestIn], Field(max_length=MAX_TESTS)]


class ActionIn(Strict):
    """One thing done to a session, for a permalink's trace."""

    op: Literal["step", "back", "force"]
    n: int = Field(default=1, ge=1, le=MAX_STEP_COUNT)
    token_id: int | None = Field(default=None, ge=0, le=MAX_TOKEN_ID)
    at: int | None = Field(default=None, ge=0, le=MAX_TOKENS)

    @model_validator(mode="after")
    def _force_names_a_token(self) -> ActionIn:
        if self.op == "force" and self.token_id is None:
            raise ValueError("a force action needs a token_id")
        return self


class OpenPermalinkIn(Strict):
    """Open a permalink on another model than the one it was made on."""

    model: ModelId | None = None


class CountIn(Strict):
    """How many steps to take or undo."""

    n: int = Field(default=1, ge=1, le=MAX_STEP_COUNT)


class ForceIn(Strict):
    """A token to force, at the next step or, going back first, at an earlier one."""

    token_id: int = Field(ge=0, le=MAX_TOKEN_ID)
    at: int | None = Field(
        default=None, ge=0, le=MAX_TOKENS, description="step index to force at (default: the next)"
    )
