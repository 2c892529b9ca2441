"""The Suite view's answers (its upload is a multipart form or a raw zip or JSONL body, read by
the route: no JSON body model)."""

from __future__ import annotations

from pydantic import BaseModel

__all__ = ["SuiteCreatedOut"]


class SuiteCreatedOut(BaseModel):
    """A suite accepted: its id and its page."""

    id: str
    url: str
