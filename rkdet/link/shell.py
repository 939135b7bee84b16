"""What a board can do, and the one way to say it: a `CommandRunner` protocol and the shell line.

Why its own module (labgrid's split of *what* from *how*): board steps (jobs, transfers, deploy's
steps) are written against `CommandRunner`, not against SSH; `rkdet.link.ssh.BoardConnection` is
the one implementation. Every remote command line is built here, from a list of arguments each
quoted with `shlex.quote` (`remote_command`, `build_command`), so no path or name is ever
interpolated raw into a shell line.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import IO, NamedTuple, Protocol

from rkdet.errors import InputError

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Seconds a board-side command may take, by what it does (`run`'s `timeout`; the SSH phases and the
# default command bound are `rkdet.link.ssh.Timeouts`): named once so every step bounds the same kind
# of command alike.
QUICK_S = 30.0  # answers at once: id, mkdir, a signal, a test -e, df
FILES_S = 60.0  # walks or removes a folder, tails a log, probes the Python on the board
SELFCHECK_S = 300.0  # the installed self-check's first run (loads the model, runs every input)


class CommandResult(NamedTuple):
    """What a remote command left: exit code, stdout and stderr (decoded as UTF-8, lenient)."""

    rc: int
    out: str
    err: str


def check_env_name(name: str) -> str:
    """`name` when it is a valid environment variable name; InputError otherwise."""
    if not ENV_NAME.match(name):
        raise InputError(f"invalid environment variable name {name!r}")
    return name


def remote_command(argv: Sequence[str]) -> str:
    """One shell line from argv, every argument quoted: the only way commands are built."""
    if not argv:
        raise InputError("empty remote command")
    return " ".join(shlex.quote(str(a)) for a in argv)


def env_prefix(env: Mapping[str, str] | None, keep_env: Iterable[str]) -> str:
    """`env K='v' K2="$K2"` (empty when nothing to set): survives `sudo`'s env_reset."""
    parts: list[str] = []
    for name in keep_env:
        parts.append(f'{check_env_name(name)}="${name}"')  # expanded by the board's shell, on purpose
    for name, value in (env or {}).items():
        check_env_name(name)
        parts.append(shlex.quote(f"{name}={value}"))
    return "env " + " ".join(parts) if parts else ""


def build_command(argv: Sequence[str], *, sudo: bool = False, env: Mapping[str, str] | None = None,
                  keep_env: Iterable[str] = ()) -> str:
    """The full shell line for argv with optional `sudo -n` and environment (after sudo)."""
    line = remote_command(argv)
    prefix = env_prefix(env, keep_env)
    if prefix:
        line = f"{prefix} {line}"
    if sudo:
        line = f"sudo -n {line}" if prefix else f"sudo -n -- {line}"
    return line


class Named(Protocol):
    """What steps need of a board's name (`rkdet.link.target.Target` is one)."""

    @property
    def label(self) -> str: ...

    @property
    def user(self) -> str: ...


class CommandRunner(Protocol):
    """What a board can do with commands: run one (bounded time, capped output), stream one, say
    where $HOME is, and explain a `sudo -n` that wants a password. `BoardConnection` is the SSH implementation."""

    @property
    def target(self) -> Named: ...

    def run(self, argv: Sequence[str], timeout: float | None = None, check: bool = True, sudo: bool = False,
            env: Mapping[str, str] | None = None, keep_env: Iterable[str] = (),
            stdin: bytes | None = None) -> CommandResult: ...

    def stream(self, command: str, *, stdout: Callable[[bytes], object] | None = None,
               stderr: Callable[[bytes], object] | None = None, stdin: bytes | IO[bytes] | None = None,
               timeout: float | None = None, what: str = "command",
               on_send: Callable[[int], object] | None = None, bulk: int = 0) -> int: ...

    def capped(self, buf: bytearray, what: str, limit: int | None = None) -> Callable[[bytes], None]: ...

    def abspath(self, path: str) -> str: ...

    def sudo_wants_password(self, result: CommandResult) -> bool: ...

    def sudo_password_message(self) -> str: ...
