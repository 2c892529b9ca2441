"""Hostile sources for the containment tests: code execution already won, then every forbidden act.

Each source runs in the sandbox process with the static check bypassed (it goes to the process
directly) and the audit hook off, so the kernel layers are all that stands in its way. Each act is
tried on its own; the source reports what happened to each (``done`` or the errno's name) by
raising ``RuntimeError`` with the results as JSON, which the process sends back as its error.
"""

from __future__ import annotations

import ast
import json
from typing import Any

__all__ = [
    "ACTS",
    "FULL_ONLY_ACTS",
    "I386_GETPID",
    "LANDLOCK_ALONE_BLOCKS",
    "OPENS_TO_READ",
    "PRELOAD",
    "SECCOMP_ALONE_BLOCKS",
    "SHADOWING",
    "X32_GETPID",
    "BUILTIN_NAMED_FIELDS",
    "attack_source",
    "with_future_annotations",
]

#: Modules the attacks use, imported before the process contains itself (afterwards it can
#: import nothing; a real attacker would find them in memory, or write machine code).
PRELOAD = ("ctypes", "encodings.idna", "errno", "mmap", "resource", "signal", "socket", "struct")

_PRELUDE = r"""
import ctypes, errno, json, os, signal, socket, struct
T = json.loads(TARGETS)
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
results = {}

def syscall(*args):
    result = libc.syscall(*[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    if result < 0:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))
    return result

def act(function):
    try:
        function()
        results[function.__name__] = "done"
    except OSError as error:
        results[function.__name__] = errno.errorcode.get(error.errno, str(error.errno))
    except Exception as error:  # not refused by the kernel: say what went wrong instead
        results[function.__name__] = f"{type(error).__name__}: {error}"

def waited(pid):
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if code >= 100:  # the child's own act was refused: 100 + its errno
        raise OSError(code - 100, os.strerror(code - 100))
    if code != 0:
        raise OSError(errno.ECHILD, f"the child ended with {code}")

def forked(then):
    pid = os.fork()
    if pid == 0:
        then()
        os._exit(0)
    waited(pid)

def vm(number):  # process_vm_readv / process_vm_writev, 8 bytes of the sibling's stack
    buffer = ctypes.create_string_buffer(8)
    local = struct.pack("QQ", ctypes.addressof(buffer), 8)
    remote = struct.pack("QQ", T["address"], 8)
    if number == 311:  # write back what is there (zeros if reading it was refused)
        try:
            syscall(310, T["sibling"], local, 1, remote, 1, 0)
        except OSError:
            pass
    syscall(number, T["sibling"], local, 1, remote, 1, 0)

def nofile_limit(pid):  # prlimit64(pid, RLIMIT_NOFILE, {32, 64}, NULL)
    syscall(302, pid, 7, ctypes.create_string_buffer(struct.pack("2Q", 32, 64)), 0)
"""

# Every act is something the sandbox must never do; each is a function named after the act.
_ACTS = r"""
def write_file():
    open(T["dir"] + "/write.txt", "w").write("pwned")

def append_file():
    open(T["dir"] + "/append.txt", "a").write("pwned")

def truncate_file():
    os.truncate(T["dir"] + "/truncate.txt", 0)

def create_file():
    open(T["dir"] + "/created.txt", "x").write("pwned")

def rename_file():
    os.rename(T["dir"] + "/rename.txt", T["dir"] + "/renamed.txt")

def delete_file():
    os.unlink(T["dir"] + "/delete.txt")

def make_dir():
    os.mkdir(T["dir"] + "/made")

def make_symlink():
    os.symlink("/etc/passwd", T["dir"] + "/link")

def read_database():
    open(T["dir"] + "/permalinks.db").read()

def read_etc():
    open("/etc/passwd").read()

def list_tmp():
    os.listdir("/tmp")

def read_sibling_environ():
    open(f"/proc/{T['sibling']}/environ", "rb").read()

def read_sibling_memory():
    with open(f"/proc/{T['sibling']}/mem", "rb") as memory:
        memory.seek(T["address"])
        memory.read(8)

def tcp_connect():
    socket.create_connection(("127.0.0.1", T["port"]), timeout=5).close()

def udp_socket():
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).close()

def inet6_socket():
    socket.socket(socket.AF_INET6, socket.SOCK_STREAM).close()

def unix_socket():
    socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()

def netlink_socket():
    socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0).close()

def socketpair():
    for end in socket.socketpair():
        end.close()

def fork():
    forked(lambda: None)

def clone():  # clone(SIGCHLD): a fork by another door
    pid = syscall(56, signal.SIGCHLD, 0, 0, 0, 0)
    if pid == 0:
        os._exit(0)
    waited(pid)

def clone3():  # struct clone_args: flags, pidfd, child_tid, parent_tid, exit_signal, ...
    args = struct.pack("8Q", 0, 0, 0, 0, signal.SIGCHLD, 0, 0, 0)
    pid = syscall(435, ctypes.create_string_buffer(args), 64)
    if pid == 0:
        os._exit(0)
    waited(pid)

def execve():  # in a forked child where fork works, else in this very process
    def run():
        try:
            os.execv("/bin/true", ["true"])
        except OSError as error:
            os._exit(100 + error.errno)
    try:
        forked(run)
    except OSError as error:
        if error.errno != errno.EPERM:
            raise
        os.execv("/bin/true", ["true"])

def io_uring_setup():
    os.close(syscall(425, 8, ctypes.create_string_buffer(120)))

def openat2():  # struct open_how {flags, mode, resolve}: flags out of a filter's reach
    how = ctypes.create_string_buffer(struct.pack("3Q", 0, 0, 0))
    os.close(syscall(437, -100, b"/etc/passwd", how, 24))

def ptrace_sibling():
    syscall(101, 0x4206, T["sibling"], 0, 0)  # PTRACE_SEIZE

def read_sibling_vm():
    vm(310)

def write_sibling_vm():
    vm(311)

def pidfd_getfd():  # the sibling's stdin through a pidfd (through fd 0 if pidfd_open is refused)
    try:
        pidfd = syscall(434, T["sibling"], 0)
    except OSError:
        pidfd = 0
    os.close(syscall(438, pidfd, 0, 0))

def lower_own_limit():
    nofile_limit(0)

def lower_sibling_limit():
    nofile_limit(T["sibling"])

def set_uid():
    os.setresuid(os.getuid(), os.getuid(), os.getuid())

def set_gid():
    os.setresgid(os.getgid(), os.getgid(), os.getgid())

def kill_sibling():
    os.kill(T["sibling"], signal.SIGKILL)

def new_user_namespace():  # last: a new namespace changes what the acts after it would mean
    syscall(272, 0x10000000)  # unshare(CLONE_NEWUSER)
"""

# Tried only under full containment: where they succeed they harm more than the test.
_FULL_ONLY_ACTS = r"""
def kill_everyone():
    os.kill(-1, signal.SIGKILL)

def signal_server():
    os.kill(T["server"], 0)

def read_server_environ():
    open(f"/proc/{T['server']}/environ", "rb").read()

def vfork():
    pid = syscall(58)
    if pid == 0:
        os._exit(0)
    waited(pid)

def tgkill_sibling():
    syscall(234, T["sibling"], T["sibling"], signal.SIGKILL)
"""


def _names(source: str) -> tuple[str, ...]:
    return tuple(n.name for n in ast.parse(source).body if isinstance(n, ast.FunctionDef))


ACTS = _names(_ACTS)
FULL_ONLY_ACTS = _names(_FULL_ONLY_ACTS)

#: Opening files to read them: seccomp lets a read-only open through, Landlock refuses it.
OPENS_TO_READ = frozenset(
    {"read_database", "read_etc", "list_tmp", "read_sibling_environ", "read_sibling_memory"}
)
#: With only the uid drop and seccomp, every act but reading is refused.
SECCOMP_ALONE_BLOCKS = frozenset(ACTS) - OPENS_TO_READ
#: With only the uid drop and Landlock (ABI 6 and up): files, TCP, other processes (ptrace,
#: signals, their memory and descriptors), executing; not sockets, forks, limits or users.
LANDLOCK_ALONE_BLOCKS = OPENS_TO_READ | {
    "write_file", "append_file", "truncate_file", "create_file", "rename_file", "delete_file",
    "make_dir", "make_symlink", "tcp_connect", "execve", "openat2", "ptrace_sibling",
    "read_sibling_vm", "write_sibling_vm", "pidfd_getfd", "kill_sibling",
}  # fmt: skip

I386_GETPID = r"""
import ctypes, mmap
page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
page.write(bytes([0xB8, 20, 0, 0, 0, 0xCD, 0x80, 0xC3]))  # mov eax, 20 (getpid); int 0x80; ret
call = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(page)))
raise RuntimeError(f"i386 getpid answered {call()}")
"""

X32_GETPID = r"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
answer = libc.syscall(ctypes.c_long(0x40000000 | 39))
raise RuntimeError(f"x32 getpid answered {answer}, errno {ctypes.get_errno()}")
"""


def attack_source(targets: dict[str, Any], *, full_only: bool = False) -> str:
    """A source that tries every act against ``targets`` and raises its results as JSON.

    Args:
        targets: what the acts aim at (``dir``, ``port``, ``sibling``, ``address``, ``server``).
        full_only: also try the acts that would harm more than the test where they succeed.
    """
    acts = _ACTS + (_FULL_ONLY_ACTS if full_only else "")
    names = ACTS + (FULL_ONLY_ACTS if full_only else ())
    calls = "".join(f"act({name})\n" for name in names)
    return (
        f"TARGETS = {json.dumps(json.dumps(targets))}\n{_PRELUDE}\n{acts}\n{calls}"
        "raise RuntimeError(json.dumps(results))\n"
    )


# ---- Names a class body shadows (issue #27, item 1): each payload passed the old static check ----

_BOOM = "int if 0 else (1/0)"  # evaluated, it raises ZeroDivisionError: the proof that it ran
_HEAD = (
    "from typing import Any, ForwardRef, List, Literal, Optional\n"
    "from pydantic import BaseModel, Field\n"
)

#: ``(id, source, what the refusal says, the line of the refused use)``. With the static check
#: bypassed, each source makes pydantic evaluate ``_BOOM`` (the child answers ZeroDivisionError).
SHADOWING = [
    (
        "literal-rebound-before",  # the reported payload
        _HEAD + f"class M(BaseModel):\n    Literal: Any = List\n    a: Literal[{_BOOM!r}] = 1\n",
        "the name 'Literal'",
        5,
    ),
    (
        "literal-rebound-after-a-string",  # pydantic evaluates strings after the body ran
        _HEAD + f'class M(BaseModel):\n    a: "Literal[{_BOOM!r}]" = 1\n    Literal: Any = List\n',
        "the name 'Literal'",
        4,
    ),
    (
        "str-rebound-to-a-string",
        _HEAD + f"class M(BaseModel):\n    str: Any = {_BOOM!r}\n    a: str\n",
        "the name 'str'",
        5,
    ),
    (
        "field-rebound-to-forwardref",
        _HEAD + f"class M(BaseModel):\n    Field: Any = ForwardRef\n    a: Field({_BOOM!r})\n",
        "the name 'Field'",
        5,
    ),
    (
        "module-alias-evaluated-in-the-model",  # a module-level string, resolved in M's namespace
        _HEAD + f'X = Optional["Literal[{_BOOM!r}]"]\n'
        "class M(BaseModel):\n    Literal: Any = List\n    a: X = None\n",
        "the name 'Literal'",
        3,
    ),
    (
        "module-alias-shadowed",
        _HEAD + f"X = int\nclass M(BaseModel):\n    X: Any = {_BOOM!r}\n    a: X\n",
        "the name 'X'",
        6,
    ),
    (
        "future-annotations",  # every annotation is a string, evaluated in the class namespace
        "from __future__ import annotations\n"
        + _HEAD
        + f"class M(BaseModel):\n    Literal: Any = List\n    a: Literal[{_BOOM!r}] = 1\n",
        "the name 'Literal'",
        6,
    ),
    (
        "imported-twice",  # M completes once Later exists, after Literal was rebound
        _HEAD + f'class M(BaseModel):\n    b: "Literal[{_BOOM!r}] | Later" = 1\n'
        "from typing import List as Literal\n"
        "class Later(BaseModel):\n    x: int\nclass Root(BaseModel):\n    m: M\n",
        "the name 'Literal' is imported twice",
        5,
    ),
    (
        "class-attribute-as-a-type",  # not a name in class scope, but a class body's binding
        _HEAD + f"class K:\n    a = {_BOOM!r}\nclass M(BaseModel):\n    x: K.a\n",
        "K.a is not a type: it is an attribute of 'K', which the source defines",
        6,
    ),
    (
        "str-enum-member-as-a-type",  # a member of a str enum is a string: a forward reference
        _HEAD + "from enum import Enum\n"
        f"class K(str, Enum):\n    a = {_BOOM!r}\nclass M(BaseModel):\n    x: Optional[K.a]\n",
        "K.a is not a type",
        7,
    ),
]


#: Fields merely named like builtins or types bind nothing a type uses: they stay legal.
#: ``date: date`` binds nothing (no value); ``type`` is the discriminator.
BUILTIN_NAMED_FIELDS = (
    "from datetime import date\n"
    "from typing import Literal, Union\n"
    "from pydantic import BaseModel, Field\n"
    "class Cat(BaseModel):\n"
    "    type: Literal['cat'] = 'cat'\n"
    "    id: int\n"
    "    format: str\n"
    "    input: str = ''\n"
    "    min: int = 0\n"
    "    max: int = Field(10, ge=0)\n"
    "    date: date\n"
    "class Dog(BaseModel):\n"
    "    type: Literal['dog'] = 'dog'\n"
    "    id: int = 0\n"
    "class Pet(BaseModel):\n"
    "    pet: Union[Cat, Dog] = Field(discriminator='type')\n"
    "    type: str = 'pet'\n"
)


def with_future_annotations(source: str) -> str:
    """``source`` with ``from __future__ import annotations`` after its docstring, if any."""
    tree = ast.parse(source)
    first = tree.body[0] if tree.body else None
    docstring = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
    after = (first.end_lineno or 0) if docstring and first is not None else 0
    lines = source.splitlines(keepends=True)
    lines.insert(after, "from __future__ import annotations\n")
    return "".join(lines)
