"""The kernel's containment of the sandbox process, which the process applies to itself.

In this order, once its imports are done and before it reads the request: ``no_new_privs``;
Landlock (read-only access to the interpreter's own paths, nothing else); the drop from root to
user and group 65534 with no supplementary groups; the seccomp filter (``seccomp.py``). None of
it can be undone by code that runs afterwards, whatever that code does inside Python.

The *level* says what held: ``full`` (everything), ``seccomp`` (everything but Landlock), ``none``.
"""

from __future__ import annotations

import ctypes
import enum
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from app.sandbox import landlock, seccomp

__all__ = ["NOBODY", "Containment", "Level", "contain", "interpreter_paths"]

NOBODY = 65534
_PR_SET_NO_NEW_PRIVS = 38


class Level(enum.StrEnum):
    """How much of the containment holds, weakest first."""

    NONE = "none"
    SECCOMP = "seccomp"
    FULL = "full"

    def at_least(self, other: Level) -> bool:
        """Whether this level is ``other`` or stronger."""
        order = list(Level)
        return order.index(self) >= order.index(other)


@dataclass
class Containment:
    """What the process applied to itself, and what failed (with the reason)."""

    uid: str = "not root, kept"
    no_new_privs: bool = False
    landlock_abi: int = 0
    seccomp: bool = False
    problems: dict[str, str] = field(default_factory=dict)

    @property
    def level(self) -> Level:
        """The strongest level whose layers all hold."""
        exposed = "uid" in self.problems or "threads" in self.problems
        if exposed or not (self.no_new_privs and self.seccomp):
            return Level.NONE
        return Level.FULL if self.landlock_abi else Level.SECCOMP

    def describe(self) -> str:
        """One line for the log: the layers that hold, then what failed and why."""
        held = [f"uid {self.uid}"]
        held += ["no_new_privs"] if self.no_new_privs else []
        held += [f"Landlock ABI {self.landlock_abi}"] if self.landlock_abi else []
        held += ["seccomp"] if self.seccomp else []
        failed = [f"{layer}: {reason}" for layer, reason in self.problems.items()]
        return ", ".join(held) + (f" (not applied: {'; '.join(failed)})" if failed else "")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, sent from the sandbox process to the server."""
        return {"level": self.level.value, "detail": self.describe()}


def interpreter_paths() -> list[str]:
    """What the interpreter reads from: its prefixes, and each package loaded from elsewhere
    (the project, a site directory added by a ``.pth`` file), not that package's neighbours."""
    prefixes = {os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, sys.exec_prefix)}
    paths = set(prefixes)
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if not file:
            continue
        path = os.path.realpath(file)
        if any(path.startswith(prefix + os.sep) for prefix in prefixes):
            continue
        while os.path.exists(os.path.join(os.path.dirname(path), "__init__.py")):
            path = os.path.dirname(path)  # up to the top-level package
        paths.add(path)
    return sorted(paths)


def _no_new_privs() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    args = (ctypes.c_ulong(a) for a in (1, 0, 0, 0))  # unused arguments must be zero, all 64 bits
    if libc.prctl(ctypes.c_int(_PR_SET_NO_NEW_PRIVS), *args) != 0:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))


def _drop_root() -> None:
    os.setgroups([])
    os.setresgid(NOBODY, NOBODY, NOBODY)
    os.setresuid(NOBODY, NOBODY, NOBODY)
    if os.getresuid() != (NOBODY,) * 3 or os.getresgid() != (NOBODY,) * 3 or os.getgroups():
        raise OSError("the process still holds another user or group")


def _attempt(done: Containment, layer: str, apply: Callable[[], object]) -> bool:
    try:
        apply()
    except OSError as error:
        done.problems[layer] = error.strerror or str(error)
        return False
    return True


def contain(
    *, readable: Iterable[str], uid: bool = True, landlock_on: bool = True, seccomp_on: bool = True
) -> Containment:
    """Apply the layers to this process, each one that the kernel allows; report what held.

    Args:
        readable: the paths Landlock leaves readable (``interpreter_paths()``).
        uid: drop root; landlock_on, seccomp_on: apply Landlock, seccomp. All of them, except in
            the tests that prove each layer does its own work.
    """
    done = Containment()
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:  # Landlock and seccomp bind the calling thread only
        done.problems["threads"] = f"the process runs {threads} threads"
    if landlock_on or seccomp_on:
        done.no_new_privs = _attempt(done, "no_new_privs", _no_new_privs)
    filters: list[seccomp.Filter] = []
    if seccomp_on:  # built now: Landlock will not let it read libseccomp
        _attempt(done, "seccomp", lambda: filters.append(seccomp.Filter(pid=os.getpid())))
    if landlock_on and _attempt(done, "landlock", lambda: landlock.restrict_self(readable)):
        done.landlock_abi = landlock.abi_version()
    if os.geteuid() == 0:
        done.uid = "root kept"
        if not uid:
            done.problems["uid"] = "not asked for"
        elif _attempt(done, "uid", _drop_root):
            done.uid = f"root dropped to {NOBODY}"
    if filters:
        done.seccomp = _attempt(done, "seccomp", filters[0].load)
    return done
