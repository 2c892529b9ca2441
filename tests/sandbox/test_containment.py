"""The kernel's containment, attacked by a source that already runs code in the sandbox process.

The static check is bypassed (the request goes to the process directly) and the audit hook is
off: the kernel layers are the only defence. The targets are open to the process's user (a 0777
directory with 0666 files, a 0644 "permalink database", a listener on loopback, a sibling process
of the same user), so when an act fails it is Landlock or seccomp that refused it, and each act is
shown to *succeed* with only the uid drop applied.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from app.exceptions import PydanticFailed, SandboxUnconfined
from app.sandbox import landlock
from app.sandbox.contain import NOBODY, Level
from app.sandbox.process import Layers, Limits, probe, run_child
from tests.sandbox.attacks import (
    ACTS,
    FULL_ONLY_ACTS,
    I386_GETPID,
    LANDLOCK_ALONE_BLOCKS,
    OPENS_TO_READ,
    PRELOAD,
    SECCOMP_ALONE_BLOCKS,
    X32_GETPID,
    attack_source,
)

ROOT = os.geteuid() == 0
FILES = ("write", "append", "truncate", "rename", "delete")
LIMITS = Limits(cpu_s=10, wall_s=30)
FULL = Layers(audit_hook=False, preload=PRELOAD)
UID_ONLY = Layers(nproc=False, landlock=False, seccomp=False, audit_hook=False, preload=PRELOAD)
SECCOMP_ONLY = Layers(nproc=False, landlock=False, audit_hook=False, preload=PRELOAD)
LANDLOCK_ONLY = Layers(nproc=False, seccomp=False, audit_hook=False, preload=PRELOAD)


@dataclass(frozen=True)
class Outcome:
    """What each act did, and what the targets look like afterwards."""

    results: dict[str, str]
    files: dict[str, str]
    connected: bool
    sibling_alive: bool


def _stack_address(pid: int) -> int:
    """An address in the sibling's stack, which stays mapped and writable."""
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        if line.endswith("[stack]"):
            return int(line.split("-")[0], 16)
    raise AssertionError("the sibling has no stack")


def _snapshot(directory: Path) -> dict[str, str]:
    out = {}
    for path in sorted(directory.iterdir()):
        if path.is_symlink():
            out[path.name] = "<symlink>"
        elif path.is_dir():
            out[path.name] = "<dir>"
        else:
            out[path.name] = path.read_text()
    return out


@contextmanager
def _targets() -> Iterator[tuple[dict[str, Any], Path, socket.socket, subprocess.Popen[bytes]]]:
    directory = Path(tempfile.mkdtemp(prefix="maskscope-targets-", dir="/tmp"))
    directory.chmod(0o777)
    for name in FILES:
        (directory / f"{name}.txt").write_text("original")
        (directory / f"{name}.txt").chmod(0o666)
    (directory / "permalinks.db").write_text("secret")
    (directory / "permalinks.db").chmod(0o644)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    user: dict[str, Any] = {"user": NOBODY, "group": NOBODY, "extra_groups": []} if ROOT else {}
    sibling = subprocess.Popen(["/bin/sleep", "600"], **user)
    targets = {
        "dir": str(directory),
        "port": listener.getsockname()[1],
        "sibling": sibling.pid,
        "address": _stack_address(sibling.pid),
        "server": os.getpid(),
    }
    try:
        yield targets, directory, listener, sibling
    finally:
        sibling.kill()
        sibling.wait()
        listener.close()
        shutil.rmtree(directory)


def _results(source: str, layers: Layers) -> dict[str, Any]:
    request = {"action": "schema", "source": source, "root_model": None}
    answer = run_child(request, LIMITS, require=Level.NONE, layers=layers)
    message = answer["error"]["message"]
    assert message.startswith("RuntimeError: "), message
    results: dict[str, Any] = json.loads(message.removeprefix("RuntimeError: "))
    return results


def _attack(layers: Layers, *, full_only: bool = False) -> Outcome:
    with _targets() as (targets, directory, listener, sibling):
        results = _results(attack_source(targets, full_only=full_only), layers)
        try:
            listener.accept()[0].close()
            connected = True
        except BlockingIOError:
            connected = False
        try:
            sibling.wait(timeout=2)
        except subprocess.TimeoutExpired:
            pass
        return Outcome(results, _snapshot(directory), connected, sibling.poll() is None)


@pytest.fixture(scope="module")
def full() -> Outcome:
    return _attack(FULL, full_only=True)


@pytest.fixture(scope="module")
def uid_only() -> Outcome:
    return _attack(UID_ONLY)


@pytest.fixture(scope="module")
def seccomp_only() -> Outcome:
    return _attack(SECCOMP_ONLY)


@pytest.fixture(scope="module")
def landlock_only() -> Outcome:
    return _attack(LANDLOCK_ONLY)


UNTOUCHED = {**{f"{name}.txt": "original" for name in FILES}, "permalinks.db": "secret"}


def test_this_machine_contains_the_sandbox_fully() -> None:
    level, detail = probe(LIMITS)
    assert level is Level.FULL, detail
    assert f"Landlock ABI {landlock.abi_version()}" in detail and "seccomp" in detail
    assert ("root dropped to 65534" in detail) is ROOT


@pytest.mark.parametrize("act", [*ACTS, *FULL_ONLY_ACTS])
def test_full_containment_refuses_each_act(full: Outcome, act: str) -> None:
    expected = "ENOSYS" if act == "clone3" else "EPERM"  # seccomp answers first...
    if act in OPENS_TO_READ | {"read_server_environ"}:
        expected = "EACCES"  # ...but lets a read-only open through, which Landlock refuses
    assert full.results[act] == expected


def test_full_containment_leaves_every_target_untouched(full: Outcome) -> None:
    assert full.files == UNTOUCHED
    assert not full.connected
    assert full.sibling_alive


@pytest.mark.parametrize("act", ACTS)
def test_each_act_succeeds_with_only_the_uid_drop(uid_only: Outcome, act: str) -> None:
    assert uid_only.results[act] == "done"


def test_with_only_the_uid_drop_the_targets_are_reached(uid_only: Outcome) -> None:
    assert uid_only.files == {
        "append.txt": "originalpwned",
        "created.txt": "pwned",
        "link": "<symlink>",
        "made": "<dir>",
        "permalinks.db": "secret",
        "renamed.txt": "original",
        "truncate.txt": "",
        "write.txt": "pwned",
    }
    assert uid_only.connected
    assert not uid_only.sibling_alive


@pytest.mark.parametrize("act", sorted(SECCOMP_ALONE_BLOCKS))
def test_seccomp_alone_refuses_all_but_reading(seccomp_only: Outcome, act: str) -> None:
    assert seccomp_only.results[act] == ("ENOSYS" if act == "clone3" else "EPERM")


def test_seccomp_alone_lets_reads_through_which_is_why_it_is_refused_by_default(
    seccomp_only: Outcome,
) -> None:
    reads = {act: seccomp_only.results[act] for act in OPENS_TO_READ}
    assert reads == dict.fromkeys(OPENS_TO_READ, "done")
    assert seccomp_only.files == UNTOUCHED and not seccomp_only.connected


@pytest.mark.parametrize("act", sorted(LANDLOCK_ALONE_BLOCKS))
def test_landlock_alone_refuses_files_tcp_and_other_processes(
    landlock_only: Outcome, act: str
) -> None:
    assert landlock.abi_version() >= 6  # TCP from ABI 4, signals from ABI 6
    assert landlock_only.results[act] in ("EACCES", "EPERM")


def test_landlock_alone_leaves_the_targets_untouched(landlock_only: Outcome) -> None:
    assert landlock_only.files == UNTOUCHED
    assert not landlock_only.connected
    assert landlock_only.sibling_alive


@pytest.mark.parametrize("source", [I386_GETPID, X32_GETPID], ids=["i386", "x32"])
def test_a_system_call_of_another_architecture_kills_the_process(source: str) -> None:
    with pytest.raises(PydanticFailed) as caught:
        run_child({"action": "schema", "source": source, "root_model": None}, LIMITS, layers=FULL)
    assert caught.value.message == "the sandbox process made a system call of another architecture"


def test_the_i386_door_is_open_without_seccomp() -> None:
    said = run_child(
        {"action": "schema", "source": I386_GETPID, "root_model": None},
        LIMITS,
        require=Level.NONE,
        layers=UID_ONLY,
    )["error"]["message"]
    assert said.startswith("RuntimeError: i386 getpid answered ") and said.split()[-1].isdigit()


def test_switching_the_audit_hook_off_from_inside_leaves_the_kernel() -> None:
    # The hook is on here, as in production; the source turns it into a no-op, then writes.
    source = (
        "import sys\n"
        "sys.modules['__main__']._guard.__code__ = (lambda event, args: None).__code__\n"
        "try:\n"
        "    open('/tmp/maskscope-hook-off', 'w')\n"
        "except OSError as error:\n"
        "    raise RuntimeError(f'errno {error.errno}') from None\n"
    )
    said = run_child({"action": "schema", "source": source, "root_model": None}, LIMITS)
    assert said["error"]["message"] == f"RuntimeError: errno {errno.EPERM}"
    assert not Path("/tmp/maskscope-hook-off").exists()


def test_a_process_below_the_required_level_refuses_to_run_the_source() -> None:
    source = "open('/tmp/maskscope-unconfined', 'w')"
    with pytest.raises(SandboxUnconfined) as caught:
        run_child(
            {"action": "schema", "source": source, "root_model": None},
            LIMITS,
            require=Level.FULL,
            layers=Layers(landlock=False),
        )
    assert "reached containment level 'seccomp', below the 'full' required" in caught.value.message
    assert not Path("/tmp/maskscope-unconfined").exists()
