"""Landlock, through its three system calls: read-only access beneath a few paths, nothing else.

Everything the kernel's ABI can restrict is handled (so denied unless a rule allows it): every
filesystem access, TCP bind and connect from ABI 4, and from ABI 6 signals to processes outside
the sandbox and connections to abstract Unix sockets. The only rules grant reading beneath the
paths given. See https://docs.kernel.org/userspace-api/landlock.html.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterable

__all__ = ["abi_version", "restrict_self"]

# The same numbers on every architecture (system calls added after the tables were unified).
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1

_READ_FILE, _READ_DIR = 1 << 2, 1 << 3
# Filesystem rights, by the ABI version that introduced them.
_FS_RIGHTS = (
    (1, (1 << 13) - 1),  # execute, write, read, remove and make (every kind of) files
    (2, 1 << 13),  # refer (link or rename across directories)
    (3, 1 << 14),  # truncate
    (5, 1 << 15),  # ioctl on devices
)
_NET_RIGHTS = (4, (1 << 0) | (1 << 1))  # bind TCP, connect TCP
_SCOPES = (6, (1 << 0) | (1 << 1))  # abstract Unix sockets, signals


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # the kernel's struct is packed
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _syscall(number: int, *args: object) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    result = int(libc.syscall(ctypes.c_long(number), *args))
    if result < 0:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))
    return result


def abi_version() -> int:
    """The Landlock ABI version the kernel offers.

    Raises:
        OSError: Landlock is not built in (ENOSYS) or not enabled at boot (EOPNOTSUPP).
    """
    version = ctypes.c_uint32(_CREATE_RULESET_VERSION)
    return _syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), version)


def restrict_self(readable: Iterable[str]) -> int:
    """Restrict this thread, and whatever it starts, to reading beneath ``readable``.

    Call it after ``no_new_privs`` is set, and while the process can still reach the paths (they
    are opened here): before dropping root when they lie under a directory only root can read.

    Returns:
        The ABI version applied.

    Raises:
        OSError: the kernel has no Landlock, or refused the ruleset.
    """
    abi = abi_version()
    attr = _RulesetAttr()
    attr.handled_access_fs = sum(bits for since, bits in _FS_RIGHTS if abi >= since)
    attr.handled_access_net = _NET_RIGHTS[1] if abi >= _NET_RIGHTS[0] else 0
    attr.scoped = _SCOPES[1] if abi >= _SCOPES[0] else 0
    size = ctypes.c_size_t(ctypes.sizeof(attr))
    ruleset = _syscall(_CREATE_RULESET, ctypes.byref(attr), size, ctypes.c_uint32(0))
    try:
        for path in readable:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                rule = _PathBeneathAttr()
                rule.parent_fd = fd
                rule.allowed_access = _READ_FILE | (_READ_DIR if os.path.isdir(path) else 0)
                _syscall(
                    _ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH),
                    ctypes.byref(rule), ctypes.c_uint32(0),
                )  # fmt: skip
            finally:
                os.close(fd)
        _syscall(_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0))
    finally:
        os.close(ruleset)
    return abi
