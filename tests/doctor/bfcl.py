"""Real tool definitions from BFCL (``tests/fixtures/bfcl/``), as tools sources for the Doctor.

Each entry's function is converted to an OpenAI tool the way BFCL's own ``convert_to_tool`` does
with ``GORILLA_TO_OPENAPI`` (``dict`` -> ``object``, ``float`` -> ``number`` with a ``float``
format, a dot in the name -> ``_``), marked ``strict``, and written as a ``tools`` source for
vLLM's ``hermes`` builder under ``tool_choice: required`` (Qwen3.6's format in vLLM).
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["BfclEntry", "entries", "tools_source"]

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "bfcl" / "simple_python_40.jsonl"
#: bfcl_eval/constants/type_mappings.py, GORILLA_TO_OPENAPI (the types these entries use).
_TO_OPENAPI = {"integer": "integer", "number": "number", "float": "number", "string": "string",
               "boolean": "boolean", "bool": "boolean", "array": "array", "list": "array",
               "dict": "object", "object": "object", "tuple": "array", "any": "string"}  # fmt: skip


@dataclass(frozen=True)
class BfclEntry:
    """One BFCL entry: its id, the OpenAI tool, and the ground-truth arguments (each argument's
    accepted values, BFCL's form)."""

    id: str
    tool: dict[str, Any]
    ground_truth: dict[str, list[Any]]


def _cast(properties: dict[str, Any]) -> dict[str, Any]:
    """bfcl_eval/model_handler/utils.py ``_cast_to_openai_type``, for these entries."""
    for value in properties.values():
        kind = value.get("type")
        if kind == "float":
            value["format"] = "float"
            value["description"] = value.get("description", "") + " This is a float type value."
        value["type"] = _TO_OPENAPI.get(kind, "string") if kind is not None else "string"
        if value["type"] in ("array", "object"):
            if "properties" in value:
                value["properties"] = _cast(value["properties"])
            elif "items" in value:
                value["items"]["type"] = _TO_OPENAPI[value["items"]["type"]]
    return properties


def _tool(function: dict[str, Any]) -> dict[str, Any]:
    function = copy.deepcopy(function)
    function["name"] = re.sub(r"\.", "_", function["name"])
    function["parameters"]["type"] = "object"
    function["parameters"]["properties"] = _cast(function["parameters"]["properties"])
    return {"type": "function", "function": {**function, "strict": True}}


def entries() -> list[BfclEntry]:
    """The 40 vendored entries, in the fixture's order."""
    out = []
    for line in FIXTURE.read_text().splitlines():
        row = json.loads(line)
        (function,) = row["function"]
        ((_, arguments),) = row["ground_truth"][0].items()
        out.append(BfclEntry(row["id"], _tool(function), arguments))
    return out


def tools_source(entry: BfclEntry) -> str:
    """The entry's tool as a ``tools`` source: vLLM's hermes builder, ``required``, strict."""
    data = {"builder": "vllm", "format": "hermes", "tools": [entry.tool],
            "tool_choice": "required"}  # fmt: skip
    return json.dumps(data, indent=2)
