"""The sandbox's seccomp filter: an allowlist of system calls, loaded through libseccomp (ctypes).

libseccomp (``libseccomp.so.2``, from the distribution) turns system call names into this
architecture's numbers, checks the architecture in the filter and refuses x32 system calls on
x86-64; this module only says what is allowed. Everything not listed fails with ``EPERM``:
processes (``fork``, ``vfork``, ``clone``, ``execve``), sockets, ``ptrace``, ``process_vm_*``,
``pidfd_*``, ``io_uring_*``, ``openat2``, ``setrlimit``, ``setuid`` and the like, every call that
creates, renames or deletes a file. ``clone3`` answers ``ENOSYS`` (C libraries fall back to
``clone``, which is refused too), a system call of another architecture kills the process.
"""

from __future__ import annotations

import ctypes
import errno
import os

__all__ = ["ALLOWED", "Filter"]

#: Allowed whatever their arguments: work on descriptors already held (stdin and the two answer
#: files), looking at files (Landlock decides what may be read), memory, time, randomness, the
#: process's own identity and signal handling, and exiting.
ALLOWED = (
    "read", "readv", "pread64", "write", "writev", "lseek", "close", "dup", "dup2", "dup3",
    "fstat", "newfstatat", "statx", "stat", "lstat", "access", "faccessat", "faccessat2",
    "readlink", "readlinkat", "getdents64", "getcwd",
    "brk", "mmap", "munmap", "mremap", "mprotect", "madvise", "futex",
    "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "sigaltstack",
    "clock_gettime", "clock_getres", "gettimeofday", "time", "nanosleep", "clock_nanosleep",
    "sched_yield", "sched_getaffinity", "getrandom", "uname", "getrusage", "times",
    "getpid", "gettid", "getuid", "geteuid", "getgid", "getegid",
    "poll", "ppoll", "select", "pselect6", "exit", "exit_group", "restart_syscall",
)  # fmt: skip

# libseccomp's constants (seccomp.h)
_ACT_ALLOW = 0x7FFF0000
_ACT_ERRNO = 0x00050000
_ACT_KILL_PROCESS = 0x80000000
_ATTR_ACT_BADARCH = 2
_CMP_EQ, _CMP_MASKED_EQ = 4, 7

# Opening for reading only: none of these flags (O_TMPFILE needs a write mode too).
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# F_DUPFD, F_GETFD, F_SETFD, F_GETFL, F_SETFL, F_DUPFD_CLOEXEC (not F_SETOWN: signals to others)
_FCNTL_COMMANDS = (0, 1, 2, 3, 4, 1030)
_IOCTL_COMMANDS = (0x5401, 0x5450, 0x5451)  # TCGETS (isatty), FIONCLEX, FIOCLEX


class _ArgCmp(ctypes.Structure):
    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


Condition = tuple[int, int, int, int]  # argument index, comparison, datum a, datum b


def _conditional(pid: int) -> list[tuple[str, tuple[Condition, ...]]]:
    """System calls allowed only with these arguments (each row is one rule; all must hold)."""
    rules: list[tuple[str, tuple[Condition, ...]]] = [
        ("openat", ((2, _CMP_MASKED_EQ, _WRITE_FLAGS, 0),)),
        ("open", ((1, _CMP_MASKED_EQ, _WRITE_FLAGS, 0),)),
        ("prlimit64", ((0, _CMP_EQ, 0, 0), (2, _CMP_EQ, 0, 0))),  # read its own limits only
        # Signals to itself only (abort() raises SIGABRT with tgkill).
        ("kill", ((0, _CMP_EQ, pid, 0),)),
        ("tkill", ((0, _CMP_EQ, pid, 0),)),
        ("tgkill", ((0, _CMP_EQ, pid, 0),)),
    ]
    rules += [("fcntl", ((1, _CMP_EQ, command, 0),)) for command in _FCNTL_COMMANDS]
    rules += [("ioctl", ((1, _CMP_EQ, command, 0),)) for command in _IOCTL_COMMANDS]
    return rules


def _library() -> ctypes.CDLL:
    lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint, ctypes.POINTER(_ArgCmp)
    ]  # fmt: skip
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_release.restype = None
    return lib


def _check(result: int, what: str) -> None:
    if result < 0:
        raise OSError(-result, f"libseccomp could not {what}: {os.strerror(-result)}")


def _add(
    lib: ctypes.CDLL, ctx: int, action: int, name: str, conditions: tuple[Condition, ...]
) -> None:
    number = lib.seccomp_syscall_resolve_name(name.encode())
    if number < 0:  # not a system call on this architecture (``open`` on arm64)
        return
    array = (_ArgCmp * max(len(conditions), 1))(*(_ArgCmp(*c) for c in conditions))
    _check(lib.seccomp_rule_add_array(ctx, action, number, len(conditions), array), f"add {name}")


class Filter:
    """The filter, built (libseccomp loaded, names resolved) but not yet in force.

    Build it while the library can still be read, i.e. before Landlock; load it last.

    Args:
        pid: this process's id; the only process it may signal.

    Raises:
        OSError: libseccomp is missing or refused a rule.
    """

    def __init__(self, *, pid: int) -> None:
        self._lib = _library()
        self._ctx = self._lib.seccomp_init(_ACT_ERRNO | errno.EPERM)
        if not self._ctx:
            raise OSError(errno.ENOMEM, "libseccomp could not start a filter")
        try:
            lib, ctx = self._lib, self._ctx
            badarch = lib.seccomp_attr_set(ctx, _ATTR_ACT_BADARCH, _ACT_KILL_PROCESS)
            _check(badarch, "set the action for other architectures")
            for name in ALLOWED:
                _add(lib, ctx, _ACT_ALLOW, name, ())
            for name, conditions in _conditional(pid):
                _add(lib, ctx, _ACT_ALLOW, name, conditions)
            _add(lib, ctx, _ACT_ERRNO | errno.ENOSYS, "clone3", ())
        except OSError:
            self._lib.seccomp_release(self._ctx)
            raise

    def load(self) -> None:
        """Put the filter in force for this process, for good (call after ``no_new_privs``).

        Raises:
            OSError: the kernel refused it (no seccomp filter support, or not allowed here).
        """
        try:
            _check(self._lib.seccomp_load(self._ctx), "load the filter")
        finally:
            self._lib.seccomp_release(self._ctx)
