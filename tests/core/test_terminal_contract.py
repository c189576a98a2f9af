"""The terminal-session contract (``wbcore_runtime.contract.terminal``): ``wbx shell``'s engine is a
service a plugin serves (``wbcore_terminals``, wbcore-terminal); with none served, the caller is told
what to install, and a served one is what ``service`` returns."""

from __future__ import annotations

from pathlib import Path

import pytest

from wbcore_runtime import hookimpl
from wbcore_runtime.contract import terminal
from wbcore_runtime.contract.errors import InvalidArgs, NotFound
from wbcore_runtime.contract.records import RECORD_KINDS, TerminalService


class _Served:
    agent_file = Path("/nowhere/agent.py")

    def handshake(self, chan: terminal.FrameChannel, secret: bytes) -> None:
        raise AssertionError("not called")

    def attach(self, chan: terminal.FrameChannel, secret: bytes, request: terminal.ShellRequest, *,
               stdin_fd: int = 0, stdout_fd: int = 1, session: int = 1, deadline: float | None = None) -> int:
        raise AssertionError("not called")


def _serving(*names: str) -> object:
    class ServesTerminals:
        @hookimpl
        def wbcore_terminals(self) -> list[TerminalService]:
            return [TerminalService(n, "a test terminal", lambda _rt: _Served()) for n in names]

    return ServesTerminals()


def test_none_served_names_the_distribution_to_install(make_runtime) -> None:
    with pytest.raises(NotFound, match="no terminal service is installed; pip install wbcore-terminal"):
        terminal.service(make_runtime(plugins=[]))


def test_the_served_engine_is_chosen_like_every_service(make_runtime, monkeypatch) -> None:
    assert RECORD_KINDS["wbcore_terminals"] is TerminalService
    served = terminal.service(make_runtime(plugins=[_serving("pty")]))
    assert isinstance(served, _Served) and served.agent_file.name == "agent.py"
    rt = make_runtime(plugins=[_serving("a", "b")])
    with pytest.raises(InvalidArgs, match="several terminal services.*WB_TERMINAL"):
        terminal.service(rt)
    assert isinstance(terminal.service(rt, "b"), _Served)


def test_a_shell_request_is_a_frozen_record_with_seed_003s_defaults() -> None:
    req = terminal.ShellRequest()
    assert (req.program, tuple(req.args), tuple(req.mounts), req.timeout_s) == ("/bin/sh", (), (), 3600.0)
    with pytest.raises(AttributeError):
        req.program = "/bin/bash"  # type: ignore[misc]
