"""Entry point of wbcore-terminal: terminal sessions' engine (``wbcore_terminals``). Imports nothing
heavy: the host's end loads when ``wbx shell`` or a shell tier first asks for it."""

from __future__ import annotations

from collections.abc import Iterator

from wbcore_runtime import hookimpl
from wbcore_runtime.contract.records import TerminalService
from wbcore_runtime.plugins.manager import lazy


@hookimpl
def wbcore_terminals() -> Iterator[TerminalService]:
    yield TerminalService(name="pty", summary="PTY sessions over frames: the agent a shell tier ships into "
                          "its sandbox and the host's relay of the user's terminal",
                          factory=lazy("wbcore_terminal.attach:service"))
