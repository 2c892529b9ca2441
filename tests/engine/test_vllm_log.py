"""The log-line parser on vLLM 0.32.0's own messages: each format string is read from the wheel's
source (``.venv-vllm``), filled as vLLM's logger fills it, with and without its prefixes."""

from __future__ import annotations

import ast
import logging

import pytest

from app.engine.vllm_log import LOG_MESSAGES, parse_log_line
from app.exceptions import InvalidInput
from tests.vllm_server import VLLM

#: vLLM's site-packages, next to the executable of its virtualenv.
_SITE = next((VLLM.parent.parent / "lib").glob("python3*/site-packages/vllm"), None)
pytestmark = pytest.mark.skipif(_SITE is None, reason=f"no vLLM wheel next to {VLLM}")

#: Where each message is logged, and a piece that finds its call.
_WHERE = {
    "rejected_tokens": ("v1/core/sched/scheduler.py", "grammar rejected tokens"),
    "failed_to_advance": ("v1/structured_output/backend_xgrammar.py", "Failed to advance FSM"),
    "draft_rejected": ("v1/structured_output/__init__.py", "rejected draft"),
}


def wheel_format(name: str) -> str:
    """The %-format string of the ``logger.error`` call that writes ``name``, from the wheel."""
    assert _SITE is not None
    relative, piece = _WHERE[name]
    tree = ast.parse((_SITE / relative).read_text())
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "error"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and piece in str(node.args[0].value)
        ):
            return str(node.args[0].value)
    raise AssertionError(f"no logger.error call with {piece!r} in {relative}")


def logged(name: str, *args: object, prefix: bool) -> str:
    """The line vLLM's logger writes: its format (``vllm/logger.py``) around the message."""
    message = wheel_format(name) % args
    if not prefix:
        return message
    record = logging.LogRecord("vllm", logging.ERROR, "scheduler.py", 2190, message, None, None)
    record.vllm_process_name = "EngineCore"
    record.fileinfo = "scheduler.py"
    fmt = "(%(vllm_process_name)s pid=%(process)d) %(levelname)s %(asctime)s "
    fmt += "[%(fileinfo)s:%(lineno)d] %(message)s"
    return logging.Formatter(fmt, "%m-%d %H:%M:%S").format(record)


def test_the_parser_knows_the_wheels_format_strings() -> None:
    """Each message the parser reads is, word for word, one the wheel logs."""
    for name, fmt, _ in LOG_MESSAGES:
        assert wheel_format(name) == fmt


@pytest.mark.parametrize("prefix", [False, True])
@pytest.mark.parametrize(
    ("name", "args", "ids"),
    [
        ("rejected_tokens", ([198, 248069, 271], "chatcmpl-7f3a-0"), (198, 248069, 271)),
        ("failed_to_advance", ("cmpl-1b2c.3", 154842), (154842,)),
        ("draft_rejected", (128822, "chatcmpl-9"), (128822,)),
    ],
)
def test_each_message_gives_its_ids(
    name: str, args: tuple[object, ...], ids: tuple[int, ...], prefix: bool
) -> None:
    line = logged(name, *args, prefix=prefix)
    assert line.startswith("(EngineCore pid=") == prefix
    found = parse_log_line(line)
    assert (found.message, found.token_ids) == (name, ids)
    assert found.request_id in {a for a in args if isinstance(a, str)}


def test_a_coloured_terminal_line_is_read() -> None:
    """On a terminal vLLM colours the prefix and the level (``ColoredFormatter``)."""
    plain = logged("rejected_tokens", [1, 2], "r-1", prefix=True)
    coloured = "\033[0;36m" + plain.replace(" ERROR ", " \033[31mERROR\033[0m ", 1)
    assert parse_log_line(coloured).token_ids == (1, 2)


def test_a_line_of_no_known_message_names_the_ones_read() -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_log_line("(EngineCore pid=7) ERROR 12-01 10:00:00 [core.py:1] something else")
    message = refused.value.message
    assert refused.value.pointer == "/log"
    assert all(fmt in message for _, fmt, _ in LOG_MESSAGES)
    assert "0.32.0" in message
