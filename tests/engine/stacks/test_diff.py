"""One source under two stacks (issue #40, the upgrade diff): the tags each real release builds
compared by JSON pointer, and the first step of a walk where the rows they mask with differ."""

from __future__ import annotations

import base64
import json
from typing import Any

from app.engine import Engine
from app.engine.grammars.spec import CompileOptions, GrammarSpec
from app.engine.stacks.diff import PointerDiff, compare_walks, pointer_diff, walk_under
from app.engine.stacks.diff_doctor import doctor_changes
from app.settings import Settings
from app.vocabulary import GrammarKind
from tests.engine.stacks.test_stack_builds import SEARCH, _arrays
from tests.engine.stacks.test_stack_replay import ORACLE
from tests.vllm_oracle import run_vllm

#: GLM-4.7's call with the array parameter holding a Windows path as the model writes it: a
#: raw backslash, which no JSON string takes (``\U``), and 0.34.0's raw text does.
PATHS = "<tool_call>search<arg_key>paths</arg_key><arg_value>"
CALL = PATHS + r'["C:\Users\ada"]</arg_value></tool_call>'
GLM = json.dumps(
    {"builder": "vllm", "format": "glm47", "tools": [SEARCH], "tool_choice": "required"}
)


def test_the_pointers_name_every_value_that_differs_and_nothing_else() -> None:
    a = {"format": {"tags": [{"begin": "<a>", "end": "</a>"}], "x/y": 1, "same": [1, 2]}}
    b = {"format": {"tags": [{"begin": "<b>", "end": "</a>"}, {"begin": "<c>"}], "x/y": True}}
    b["format"]["same"] = [1, 2]
    assert pointer_diff(a, b) == [
        PointerDiff("/format/tags/0/begin", "<a>", "<b>"),
        PointerDiff("/format/tags/1", None, {"begin": "<c>"}),
        PointerDiff("/format/x~1y", 1, True),  # 1 == True in Python, not in JSON
    ]
    assert pointer_diff(a, a) == [] and pointer_diff(None, a) == [PointerDiff("", None, a)]


def _finding(cause: str, count: int) -> dict[str, Any]:
    return {"cause": cause, "direction": "grammar_accepts_schema_rejects", "keywords": ["maxItems"],
            "pointers": ["/maxItems"], "count": count, "example": "[1, 2]" * count}  # fmt: skip


def _answer(findings: list[Any], status: str, messages: list[str]) -> dict[str, Any]:
    row = {"pointer": "/type", "keyword": "type", "status": status, "detail": status}
    backend = {"backend": "xgrammar", "verdict": "ignores", "rules_version": "",
               "messages": [{"message": m, "pointer": None} for m in messages]}  # fmt: skip
    return {"findings": findings, "keywords": [row], "backends": [backend]}


def test_the_doctor_diff_keeps_only_what_one_side_finds() -> None:
    """The same finding on both sides (another count and example: the search's) is no change;
    a finding on one side, a keyword's other status, a message one row says are."""
    same, only = _finding("xgrammar ignores maxItems", 1), _finding("the grammar accepts x", 1)
    a = _answer([same, only], "enforced", ["kept", "gone"])
    b = _answer([{**same, "count": 3, "example": "[]"}], "ignored", ["kept", "new"])
    changes = [c.to_dict() for c in doctor_changes(a, b)]
    assert [c["kind"] for c in changes] == ["finding", "keyword", "backend"]
    finding, keyword, backend = changes
    assert finding["cause"] == only["cause"] and finding["b"] is None and finding["a"]["count"] == 1
    assert (keyword["pointer"], keyword["a"]["status"], keyword["b"]["status"]) == (
        "/type", "enforced", "ignored")  # fmt: skip
    assert [m["message"] for m in backend["a"]["messages"]] == ["gone"]
    assert [m["message"] for m in backend["b"]["messages"]] == ["new"]
    assert doctor_changes(a, a) == ()
    refused = {"error": {"code": "grammar_invalid", "message": "vllm-0.34.0: refused"}}
    (examination,) = doctor_changes(a, refused)
    assert examination.to_dict() == {"kind": "examination", "a": None, "b": refused["error"]}
    (both,) = doctor_changes(refused, refused)  # failed alike is never "nothing differs"
    assert both.a == both.b == refused["error"]


def test_glm47_names_the_array_pointer_and_the_first_step_whose_masks_differ(
    settings: Settings, qwen: Engine[Any]
) -> None:
    grammar = qwen.compile(GrammarSpec(GrammarKind.TOOLS, GLM, CompileOptions()))
    tokens = qwen.model.tokens
    ids = tokens.encode(CALL)
    old, new = (
        walk_under(settings, stack, grammar, tokens, tokenizer=qwen.tools.tokenizer, ids=ids)
        for stack in ("vllm-0.32.0", "vllm-0.34.0")
    )
    diff = compare_walks(old, new, tokens)
    assert diff.stacks == ("vllm-0.32.0", "vllm-0.34.0")
    assert old.tag is not None
    (array,) = _arrays(old.tag)  # 0.32.0 compiles the array as JSON, 0.34.0 keeps raw text
    changed = {change.pointer for change in diff.tag_diff}
    assert f"{array}/type" in changed and all(p.startswith(array) for p in changed)
    assert "json_schema" in diff.grammar_diff or "array" in diff.grammar_diff
    # The masks agree up to the token that closes ``<arg_value>``: there a token may run on
    # into the value (``>[`` under both, ``>C`` under 0.34.0 only), and on inside it.
    start = len(tokens.encode(PATHS))
    assert ids[:start] == tokens.encode(PATHS) and tokens.text(ids[start - 1]).endswith(">")
    assert diff.first_step == start - 1, [(s.index, s.token) for s in diff.steps]
    assert [s.index for s in diff.steps[:2]] == [start - 1, start]
    inside = diff.steps[1]
    assert inside.only_b.count > inside.only_a.count == 0  # the raw text allows more than JSON
    assert any(not e.lstrip().startswith("[") for e in inside.only_b.examples)
    # 0.32.0 refuses the path's ``\U`` (no JSON escape); 0.34.0 takes the whole call
    old_walk, new_walk = diff.walks
    assert not old_walk.accepted and old_walk.rejection is not None
    refused = old_walk.rejection.token_index
    assert tokens.text(ids[refused - 1]).endswith("\\") and tokens.text(ids[refused])[0] == "U"
    assert new_walk.accepted and new_walk.mask_by and new_walk.mask_by["stack"] == "vllm-0.34.0"
    assert diff.to_dict()["first_step"] == start - 1


def test_a_stack_against_itself_differs_nowhere(settings: Settings, qwen: Engine[Any]) -> None:
    grammar = qwen.compile(GrammarSpec(GrammarKind.TOOLS, GLM, CompileOptions()))
    tokens = qwen.model.tokens
    ids = tokens.encode(CALL)
    a, b = (
        walk_under(settings, "vllm-0.34.0", grammar, tokens, tokenizer=qwen.tools.tokenizer,
                   ids=ids)
        for _ in range(2)
    )  # fmt: skip
    diff = compare_walks(a, b, tokens)
    assert diff.tag_diff == () and diff.grammar_diff == "" and diff.first_step is None
    assert a.grammar_text and all(t.bitmask is not None for t in a.result.tokens)


IM_END, TOOL_CALL = 248046, 248058  # Qwen3.6's: ``<|im_end|>`` flagged special, and ``<tool_call>``


def _bit(row: bytes | None, token_id: int) -> bool:
    assert row is not None
    return bool(row[token_id >> 3] >> (token_id & 7) & 1)


def test_inside_a_json_string_0_34_0_blocks_the_added_tokens_its_vocabulary_drops(
    settings: Settings, qwen: Engine[Any]
) -> None:
    """A ``response_format`` schema on Qwen3.6: inside a JSON string, ``<|im_end|>`` is blocked
    by both releases, ``<tool_call>`` allowed by 0.32.0 and blocked by 0.34.0 (its JSON masks are
    built on a vocabulary without the added tokens flagged special). Each row equals the one the
    oracle reads from that release's own ``XgrammarBackend``."""
    schema = json.dumps({"type": "object", "properties": {"q": {"type": "string"}}})
    grammar = qwen.compile(GrammarSpec(GrammarKind.JSON_SCHEMA, schema, CompileOptions()))
    tokens = qwen.model.tokens
    ids = tokens.encode('{"q": "a')
    assert IM_END in tokens.special_ids and TOOL_CALL not in tokens.special_ids
    walks = {}
    for stack in ("vllm-0.32.0", "vllm-0.34.0"):
        walks[stack] = walk_under(settings, stack, grammar, tokens, tokenizer=qwen.tools.tokenizer,
                                  ids=ids)  # fmt: skip
        case = {"tokenizer": qwen.tools.tokenizer, "vocab_size": tokens.vocab_size,
                "json_schema": schema, "token_ids": ids}  # fmt: skip
        (oracle,) = run_vllm(ORACLE.read_text(), {"cases": [case]}, stack=stack)["results"]
        rows = [base64.b64encode(t.bitmask or b"").decode() for t in walks[stack].result.tokens]
        assert rows == oracle["rows"], stack
    old, new = (walks[s].result.tokens[-1].bitmask for s in ("vllm-0.32.0", "vllm-0.34.0"))
    assert not _bit(old, IM_END) and not _bit(new, IM_END)
    assert _bit(old, TOOL_CALL) and not _bit(new, TOOL_CALL)
    diff = compare_walks(walks["vllm-0.32.0"], walks["vllm-0.34.0"], tokens)
    assert diff.first_step == len(ids) - 1  # inside the string, and nowhere before
    (inside,) = diff.steps
    assert inside.only_a.count > 0 and inside.only_b.count == 0 and inside.only_a.examples
