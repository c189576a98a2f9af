"""The terminal-session contract (seed 003's PTY, ``wbx shell``): what a shell tier hands the host,
and what the host asks of the terminal engine.

A sandbox tier that offers ``wbx shell`` (``shell`` in its ``IsolationTier.kinds``) starts a
*guest agent* inside its sandbox and returns a :class:`ShellSandbox`: a channel of frames
(``wbcore_runtime.wire.frames``) to the agent and the session secret. Then the same frames
flow whatever the tier:

    host                                           agent (in the sandbox)
    Ping(secret, version)                    →
                                             ←     Pong(version)
    PtyOpen{session, program, args, cols, rows, env, secret}  →   allowlist, forkpty, exec
                                             ←     PtyOpened{session, ok, error}
    PtyData(secret + session + keystrokes)   →     written to the session's pty master
                                             ←     PtyData(session + terminal output)
    PtyResize{session, cols, rows, secret}   →     TIOCSWINSZ (the child gets SIGWINCH)
    PtyClose{session, secret}                →     SIGHUP to the child's process group
                                             ←     PtyClosed{session, exit_code}
    Shutdown(secret)                         →     the agent hangs up every session and exits

The engine (the agent's loop, the host's relay of the user's terminal) is a plugin's: it
serves a :class:`Terminal` through ``wbcore_terminals`` (``wbcore-terminal``), and a caller
takes it with :func:`service`. The container tier ships :attr:`Terminal.agent_file` into its
sandbox next to ``frames.py``; the microvm guest's agent is a C rendering of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from wbcore_runtime.contract.host import Choice

if TYPE_CHECKING:
    from wbcore_runtime.dispatch.mounts import Mount

ENV_CHOICE = "WB_TERMINAL"
NONE_INSTALLED = "no terminal service is installed; pip install wbcore-terminal"


class PtyError(Exception):
    """A session could not be opened or its agent went away (the message says which)."""


@dataclass(frozen=True, slots=True)
class ShellRequest:
    """What ``wbx shell`` asks a tier for: a sandbox whose agent serves terminal sessions."""

    program: str = "/bin/sh"
    args: Sequence[str] = ()
    mounts: Sequence[Mount] = ()  # granted by wbcore_runtime.dispatch.mounts.parse_mounts
    timeout_s: float = 3600.0
    env: Mapping[str, str] = field(default_factory=dict)


class FrameChannel(Protocol):
    """Frames over two file descriptors (``wbcore_runtime.wire.frames.Channel``): the host's end."""

    read_fd: int
    write_fd: int

    def recv(self) -> tuple[int, bytes]: ...
    def send_frame(self, frame: bytes) -> None: ...


class ShellSandbox(Protocol):
    """What a shell tier's ``open_shell(ShellRequest)`` returns: ``channel`` and ``secret`` reach
    its agent (the handshake done), ``deadline`` (monotonic) is the session's end; ``close`` ends it."""

    channel: FrameChannel
    secret: bytes
    deadline: float

    def close(self) -> None: ...


class Terminal(Protocol):
    """What ``TerminalService.factory(runtime)`` returns (``wbcore-terminal``)."""

    #: The agent's module, standard library and ``frames`` only: what a tier ships into its
    #: sandbox next to ``frames.py`` (imported there by name; it serves sessions with ``Agent``).
    agent_file: Path

    def handshake(self, chan: FrameChannel, secret: bytes) -> None:
        """Ping the agent with the secret; its Pong names the same protocol version
        (:class:`PtyError` if it answers anything else)."""
        ...

    def attach(self, chan: FrameChannel, secret: bytes, request: ShellRequest, *, stdin_fd: int = 0,
               stdout_fd: int = 1, session: int = 1, deadline: float | None = None) -> int:
        """Open terminal session ``session`` and relay the host's terminal to it until its child
        exits; its exit code. Past ``deadline`` (monotonic) the session is closed and
        :class:`PtyError` raised."""
        ...


#: ``service(runtime, name)``: the terminal engine to use (``contract.host.Choice``).
service: Choice[Terminal] = Choice(lambda r: r.terminals, ENV_CHOICE,
                                   ("terminal service", "terminal services"), NONE_INSTALLED)
