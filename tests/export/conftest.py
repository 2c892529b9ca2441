"""Export requests built the way the web layer builds them, and snippets run for real."""

from __future__ import annotations

import ast
import json
import shlex
import sys
import threading
import types
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from app.engine import Engine, GrammarSpec, render_prompt
from app.engine.grammars.spec import CompileOptions, GrammarKind
from app.examples import load_examples
from app.export import ExportRequest, Message, PydanticSource, Sampling

PRICING = next(e for e in load_examples() if e.id == "pricing")
# A valid PricingDecision: what the capture server answers, so the SDK's parse helper succeeds.
ANSWER = json.dumps(
    {
        "churn_analysis": "a",
        "financial_analysis": "b",
        "margin_math": "c",
        "max_discount_percent": 10,
        "offer_code": "ABCD12",
        "customer_message": "d",
    }
)


#: The note every snippet of :func:`validated_pricing` carries (comment lines joined).
STRIPPED_NOTE = (
    "Maskscope removed these methods before running the source: "
    "PricingDecision.check_code (@field_validator, @classmethod)."
)


def validated_pricing(marker: Path) -> str:
    """The pricing model with a validator whose default argument creates ``marker``: it runs
    wherever the ``def`` runs, so an export that carried it would run it on paste."""
    source = PRICING.source(".py").replace(
        "from pydantic import BaseModel, Field",
        "from pydantic import BaseModel, Field, field_validator",
    )
    payload = f"__import__('pathlib').Path({str(marker)!r}).touch()"
    return source + (
        "\n"
        '    @field_validator("offer_code")\n'
        "    @classmethod\n"
        f"    def check_code(cls, v: str, _: object = {payload}) -> str:\n"
        "        return v\n"
    )


def unwrapped(code: str) -> str:
    """A snippet with its comment lines joined, to find a sentence the comment wrapped."""
    return code.replace("\n# ", " ")


def checkpoint(engine: Engine) -> str:
    """The local directory the model was loaded from: snippets load it instead of the hub id."""
    path: str = engine.model.tokens.tokenizer.name_or_path
    return path


def make_request(
    engine: Engine,
    *,
    kind: GrammarKind = GrammarKind.JSON_SCHEMA,
    source: str = PRICING.source(),
    options: CompileOptions | None = None,
    preset: str = "maskscope",
    messages: tuple[Message, ...] = (
        Message("system", PRICING.system),
        Message("user", PRICING.prompt),
    ),
    raw_prompt: str | None = None,
    sampling: Sampling | None = None,
    max_tokens: int = 8,
    pydantic: PydanticSource | None = None,
    model: str | None = None,
) -> ExportRequest:
    """An export request, its prompt rendered by the model's own chat template."""
    chat = [{"role": m.role, "content": m.content} for m in messages]
    prompt = None
    if raw_prompt is None and messages:
        from app.engine import ChatMessage

        prompt = render_prompt(engine.model.tokens, [ChatMessage(**m) for m in chat]).text
    return ExportRequest(
        kind=kind,
        source=source,
        schema=json.loads(source) if kind is GrammarKind.JSON_SCHEMA else None,
        options=options or CompileOptions(),
        preset=preset,
        model=model or checkpoint(engine),
        messages=messages if raw_prompt is None else (),
        raw_prompt=raw_prompt,
        prompt_text=prompt,
        sampling=sampling or Sampling(),
        max_tokens=max_tokens,
        pydantic=pydantic,
    )


def spec_of(req: ExportRequest, source: str | None = None) -> GrammarSpec:
    """The spec Maskscope compiles for the request."""
    return GrammarSpec(req.kind, source or req.source, req.options)


def module_scope() -> dict[str, Any]:
    """The globals of a fresh module ``snippet`` (registered: pydantic resolves a model's
    annotations through ``sys.modules``, as when the snippet runs as a file)."""
    module = types.ModuleType("snippet")
    sys.modules["snippet"] = module
    return module.__dict__


def run(code: str) -> dict[str, Any]:
    """Run a whole snippet as a module; its globals."""
    scope = module_scope()
    exec(compile(code, "<snippet>", "exec"), scope)  # noqa: S102
    return scope


def run_until(code: str, name: str, namespace: dict[str, Any] | None = None) -> Any:
    """Run the snippet statement by statement until it binds ``name``; return that value."""
    scope = module_scope() if namespace is None else namespace
    for statement in ast.parse(code).body:
        exec(compile(ast.Module([statement], []), "<snippet>", "exec"), scope)  # noqa: S102
        if name in scope:
            return scope[name]
    raise AssertionError(f"the snippet never binds {name}")


def curl_body(code: str) -> dict[str, Any]:
    """A curl command's ``-d`` body, split as the shell splits it and parsed as JSON."""
    words = shlex.split(code, comments=True)
    assert words[0] == "curl"
    body: dict[str, Any] = json.loads(words[words.index("-d") + 1])
    return body


def constant(code: str, name: str) -> Any:
    """The value of a top-level ``NAME = <literal>`` in the snippet."""
    for statement in ast.parse(code).body:
        if isinstance(statement, ast.Assign) and ast.unparse(statement.targets[0]) == name:
            return ast.literal_eval(statement.value)
    raise AssertionError(f"no constant {name}")


class Capture:
    """An HTTP server on loopback that records each JSON request and answers like the servers."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, Any]]] = []
        capture = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                length = int(self.headers["Content-Length"])
                capture.requests.append((self.path, json.loads(self.rfile.read(length))))
                answer = _answer(self.path)
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def body(self) -> tuple[str, dict[str, Any]]:
        """The one request received since the last call."""
        (request,) = self.requests
        self.requests.clear()
        return request


def _answer(path: str) -> dict[str, Any]:
    if path.endswith("/generate"):
        return {"text": ANSWER, "meta_info": {}}
    if path.endswith("/chat/completions"):
        message = {"role": "assistant", "content": ANSWER}
        choice = {"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}
        return {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [choice],
        }
    choice = {"index": 0, "text": ANSWER, "finish_reason": "stop", "logprobs": None}
    return {"id": "x", "object": "text_completion", "created": 0, "model": "m", "choices": [choice]}


@pytest.fixture(scope="session")
def capture() -> Iterator[Capture]:
    """The capture server."""
    server = Capture()
    yield server
    server.server.shutdown()
