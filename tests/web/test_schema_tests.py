"""``POST /api/tests``: schema unit tests judged by the grammar (on the normalised form) and by
the schema, on the real model's tokenizer and real xgrammar."""

from __future__ import annotations

import json
from typing import Any

from fastapi.testclient import TestClient

from app.doctor.serialize import in_schema_order

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "age": {"type": "integer", "minimum": 0},
        "email": {"type": "string", "format": "email"},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


def _run(client: TestClient, grammar: dict[str, Any], *tests: tuple[str, str]) -> Any:
    body = {"grammar": grammar, "tests": [{"text": t, "expect": e} for t, e in tests]}
    response = client.post("/api/tests", json=body)
    assert response.status_code == 200, response.text
    return response.json()["results"]


def _schema(schema: Any, **options: Any) -> dict[str, Any]:
    return {"kind": "json_schema", "source": json.dumps(schema), "options": options}


def test_a_schema_whose_tests_all_pass(client: TestClient) -> None:
    results = _run(
        client,
        _schema(PERSON),
        ('{"name": "Ada", "age": 36}', "pass"),
        ('{"name": "Ada", "age": 36, "email": "ada@example.com"}', "pass"),
        ('{"name": "Ada"}', "fail"),
        ('{"name": "Ada", "age": -1}', "fail"),
        ('{"name": "Ada", "age": 36, "admin": true}', "fail"),
        ("not json", "fail"),
    )
    assert [r["passed"] for r in results] == [True] * 6
    assert [r["disagree"] for r in results] == [False] * 6
    assert [r["schema"]["valid"] for r in results] == [True, True, False, False, False, False]
    assert results[0]["grammar"] == {"accepted": True, "complete": True, "rejection": None}
    assert results[0]["normalized"] == '{"name": "Ada", "age": 36}'
    assert results[5]["normalized"] is None
    refused = results[2]["grammar"]
    assert not refused["accepted"] and refused["rejection"]["offset"] == len('{"name": "Ada"')
    assert results[2]["schema"]["errors"] == [
        {"path": "$", "message": "'age' is a required property"}
    ]


def test_a_should_fail_document_the_grammar_accepts_is_a_disagreement(
    client: TestClient,
) -> None:
    unique = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}
    [result] = _run(client, _schema(unique), ("[1, 1]", "fail"))
    assert result["grammar"]["accepted"] and result["grammar"]["complete"]
    assert result["schema"]["valid"] is False
    assert "has non-unique elements" in result["schema"]["errors"][0]["message"]
    assert result["passed"] is False and result["disagree"] is True


def test_a_document_in_other_separators_and_key_order_is_judged_normalised(
    client: TestClient,
) -> None:
    written = '{\n  "email":"ada@example.com",\n  "age":36,"name":"Ada"}'
    [result] = _run(client, _schema(PERSON), (written, "pass"))
    assert result["normalized"] == '{"name": "Ada", "age": 36, "email": "ada@example.com"}'
    as_written = result["grammar_as_written"]
    assert not as_written["accepted"] and as_written["rejection"]["offset"] == 1
    assert result["grammar"]["accepted"] and result["grammar"]["complete"]
    assert result["passed"] and not result["disagree"]


def test_normalisation_follows_the_options_and_the_schema_through_refs_and_branches(
    client: TestClient,
) -> None:
    schema = {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "owner": {"$ref": "#/$defs/Person"},
            "shape": {
                "anyOf": [
                    {"type": "object", "properties": {"kind": {"const": "circle"},
                                                      "radius": {"type": "number"}},
                     "required": ["kind", "radius"]},
                    {"type": "object", "properties": {"kind": {"const": "box"},
                                                      "w": {"type": "number"},
                                                      "h": {"type": "number"}},
                     "required": ["kind", "w", "h"]},
                ]
            },
            "tags": {"type": "array", "items": {"$ref": "#/$defs/Person"}},
        },
        "required": ["id", "owner", "shape"],
        "$defs": {"Person": PERSON},
    }  # fmt: skip
    document = {
        "tags": [{"age": 1, "name": "b"}],
        "shape": {"h": 2, "w": 1.5, "kind": "box"},
        "owner": {"age": 36, "name": "Ada"},
        "id": 7,
    }
    text = json.dumps(document)
    # Not with an indent: xgrammar indents a $ref'd definition for the depth of its first use
    # (here 1), so the grammar refuses ``tags[0]`` written at its true depth (2).
    for options in ({}, {"any_whitespace": True}, {"separators": [",", ":"]}):
        [result] = _run(client, _schema(schema, **options), (text, "pass"))
        normalized = result["normalized"]
        assert list(json.loads(normalized)) == ["id", "owner", "shape", "tags"]
        assert list(json.loads(normalized)["shape"]) == ["kind", "w", "h"]
        assert result["grammar"]["accepted"] and result["grammar"]["complete"], options
        assert result["passed"] and not result["disagree"], options
    assert normalized == json.dumps(
        {"id": 7, "owner": {"name": "Ada", "age": 36},
         "shape": {"kind": "box", "w": 1.5, "h": 2}, "tags": [{"name": "b", "age": 1}]},
        separators=(",", ":"),
    )  # fmt: skip


def test_an_indent_is_written_as_the_grammar_writes_it(client: TestClient) -> None:
    nested = {"type": "object", "properties": {
        "a": {"type": "integer"}, "t": {"type": "array", "items": {"type": "integer"}},
        "o": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]},
    }, "required": ["a", "t", "o"]}  # fmt: skip
    [result] = _run(client, _schema(nested, indent=2), ('{"o":{"x":1},"t":[1,2],"a":1}', "pass"))
    assert (
        result["normalized"]
        == '{\n  "a": 1,\n  "t": [\n    1,\n    2\n  ],\n  "o": {\n    "x": 1\n  }\n}'
    )
    assert result["grammar"]["accepted"] and result["grammar"]["complete"] and result["passed"]


def test_a_regex_with_tests(client: TestClient) -> None:
    grammar = {"kind": "regex", "source": r"[a-z]+@[a-z]+\.com"}
    results = _run(client, grammar, ("ada@example.com", "pass"), ("Ada@example.com", "fail"),
                   ("ada@example.org", "pass"))  # fmt: skip
    assert [r["passed"] for r in results] == [True, True, False]
    assert all(r["schema"] is None and r["normalized"] is None for r in results)
    assert not any(r["disagree"] for r in results)
    assert results[1]["grammar"]["rejection"]["offset"] == 0
    assert results[2]["grammar"]["rejection"]["offset"] == len("ada@example.")


def test_an_ebnf_grammar_with_tests(client: TestClient) -> None:
    grammar = {"kind": "ebnf", "source": 'root ::= "yes" | "no" | "n" [0-9]+'}
    results = _run(client, grammar, ("yes", "pass"), ("n42", "pass"), ("n", "fail"),
                   ("maybe", "fail"), ("42", "pass"))  # fmt: skip
    assert [r["passed"] for r in results] == [True, True, True, True, False]
    incomplete = results[2]["grammar"]
    assert incomplete == {"accepted": True, "complete": False, "rejection": None}
    assert results[4]["normalized"] is None and results[4]["schema"] is None


PYDANTIC = """
from pydantic import BaseModel, Field


class Item(BaseModel):
    name: str
    quantity: int = Field(ge=1, multiple_of=2)
"""


def test_a_pydantic_schema_with_tests(client: TestClient) -> None:
    grammar = {"kind": "pydantic", "source": PYDANTIC}
    results = _run(
        client,
        grammar,
        ('{"quantity":2,"name":"bolt"}', "pass"),
        ('{"name": "bolt", "quantity": 0}', "fail"),
        ('{"name": "bolt", "quantity": 3}', "fail"),
    )
    assert results[0]["normalized"] == '{"name": "bolt", "quantity": 2}'
    assert results[0]["passed"] and results[0]["schema"] == {"valid": True, "errors": []}
    assert results[1]["schema"]["valid"] is False
    assert "greater than or equal to 1" in results[1]["schema"]["errors"][0]["message"]
    assert results[2]["schema"]["valid"] is False
    assert "multiple of 2" in results[2]["schema"]["errors"][0]["message"]
    # xgrammar enforces ge=1 but lets 3 through: the should-fail test fails, flagged
    assert [r["passed"] for r in results] == [True, True, False]
    assert [r["disagree"] for r in results] == [False, False, True]


def test_the_caps_are_declared_and_enforced(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()["components"]["schemas"]
    assert schema["SchemaTestsIn"]["properties"]["tests"]["maxItems"] == 100
    assert schema["SchemaTestIn"]["properties"]["text"]["maxLength"] == 65536
    grammar = _schema(PERSON)
    many = {"grammar": grammar, "tests": [{"text": "{}", "expect": "fail"}] * 101}
    response = client.post("/api/tests", json=many)
    assert response.status_code == 422 and response.json()["error"]["pointer"] == "/tests"
    big = {"grammar": grammar, "tests": [{"text": "{}", "expect": "fail"},
                                         {"text": "é" * 32769, "expect": "fail"}]}  # fmt: skip
    response = client.post("/api/tests", json=big)
    assert response.status_code == 413
    assert response.json()["error"] == {
        "message": "test 1 is 65538 bytes; a test may hold 65536",
        "code": "too_large",
        "pointer": "/tests/1/text",
    }


def test_bad_input_is_a_4xx_that_says_where(client: TestClient) -> None:
    bad_expect = {"grammar": _schema(PERSON), "tests": [{"text": "{}", "expect": "maybe"}]}
    response = client.post("/api/tests", json=bad_expect)
    assert response.status_code == 422
    assert response.json()["error"]["pointer"] == "/tests/0/expect"
    broken = {"grammar": {"kind": "json_schema", "source": "{"}, "tests": []}
    assert client.post("/api/tests", json=broken).status_code == 422


class _Counted(dict[str, Any]):
    """A schema object that counts the reads of its keywords (all of them, in ``reads``)."""

    reads = 0

    def __getitem__(self, key: str) -> Any:
        _Counted.reads += 1
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        _Counted.reads += 1
        return super().get(key, default)


def _counted(node: Any) -> Any:
    if isinstance(node, dict):
        return _Counted({key: _counted(value) for key, value in node.items()})
    if isinstance(node, list):
        return [_counted(value) for value in node]
    return node


def test_branches_that_refer_to_each_other_are_ordered_in_bounded_work() -> None:
    # 40 levels of two branches each: a walk that tried every path would read ~2**40 keywords.
    defs: dict[str, Any] = {
        f"D{i}": {"anyOf": [{"$ref": f"#/$defs/D{i + 1}"}] * 2} for i in range(40)
    }
    defs["D40"] = {"anyOf": [{"$ref": "#/$defs/D0"}, {"properties": {"b": {}, "a": {}}}]}
    schema = _counted({"$ref": "#/$defs/D0", "$defs": defs})
    value = {"a": [{"a": 1, "b": 2}] * 50, "b": 2}
    _Counted.reads = 0
    ordered = in_schema_order(value, schema)
    assert _Counted.reads < 50_000  # 13,356 today
    assert list(ordered) == ["b", "a"] and ordered == value
