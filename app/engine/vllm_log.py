"""The token ids in a pasted vLLM log line: the three structured-output failures of vLLM 0.32.0.

The messages, as the wheel writes them (``%s`` filled by the logger):

- ``vllm/v1/core/sched/scheduler.py``: ``Unexpected: grammar rejected tokens %s for request %s.
  Terminating request.`` (the list of the step's new ids, reasoning ids included: it is taken
  before the reasoning is trimmed);
- ``vllm/v1/structured_output/backend_xgrammar.py``: ``Failed to advance FSM for request %s for
  tokens %s. Please file an issue.`` (one id);
- ``vllm/v1/structured_output/__init__.py``: ``Unexpected: grammar terminated or rejected draft
  token %s for request %s during bitmask fill.`` (one draft id).

vLLM's logger prefixes them with ``(EngineCore pid=N) ERROR MM-DD HH:MM:SS [file.py:line]``
(``VLLM_LOGGING_PREFIX`` before it, colours on a terminal); the message is found wherever it is
in the line, so any prefix (or none) is read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.exceptions import InvalidInput

__all__ = ["LOG_MESSAGES", "VLLM_VERSION", "LoggedIds", "parse_log_line"]

#: The vLLM release whose messages are read.
VLLM_VERSION = "0.32.0"

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_IDS = r"\[(?P<ids>[0-9,\s]*)\]"
_ONE = r"(?P<ids>\d+)"
_REQUEST = r"(?P<request>\S+?)"

#: Each message: its name, the wheel's format string, and a pattern finding its ids.
LOG_MESSAGES: tuple[tuple[str, str, re.Pattern[str]], ...] = (
    (
        "rejected_tokens",
        "Unexpected: grammar rejected tokens %s for request %s. Terminating request.",
        re.compile(rf"Unexpected: grammar rejected tokens {_IDS} for request {_REQUEST}\. "),
    ),
    (
        "failed_to_advance",
        "Failed to advance FSM for request %s for tokens %s. Please file an issue.",
        re.compile(rf"Failed to advance FSM for request {_REQUEST} for tokens {_ONE}\. "),
    ),
    (
        "draft_rejected",
        "Unexpected: grammar terminated or rejected draft token %s for request %s during "
        "bitmask fill.",
        re.compile(
            rf"Unexpected: grammar terminated or rejected draft token {_ONE} for request "
            rf"{_REQUEST} during bitmask fill\."
        ),
    ),
)


@dataclass(frozen=True, slots=True)
class LoggedIds:
    """What a log line says.

    Attributes:
        message: which of :data:`LOG_MESSAGES` it is.
        token_ids: the ids it names, in order.
        request_id: the request it names.
    """

    message: str
    token_ids: tuple[int, ...]
    request_id: str


def parse_log_line(line: str) -> LoggedIds:
    """The ids in one of vLLM 0.32.0's structured-output error lines, prefix or none.

    Raises:
        InvalidInput: the line holds none of the messages (the message lists those read), or
            names no id.
    """
    plain = _ANSI.sub("", line).strip()
    for name, _, pattern in LOG_MESSAGES:
        found = pattern.search(plain + " ")  # a line cut after the message's full stop
        if found is None:
            continue
        ids = tuple(int(i) for i in re.findall(r"\d+", found["ids"]))
        if not ids:
            raise InvalidInput(f"the log line's {name} message names no token id", pointer="/log")
        return LoggedIds(name, ids, found["request"])
    understood = "; ".join(f"'{fmt}'" for _, fmt, _ in LOG_MESSAGES)
    raise InvalidInput(
        f"the log line holds none of the vLLM {VLLM_VERSION} messages read here ({understood}, "
        "with %s the ids and the request id, with or without the "
        "'(EngineCore pid=N) ERROR ... [file:line]' prefix)",
        pointer="/log",
    )
