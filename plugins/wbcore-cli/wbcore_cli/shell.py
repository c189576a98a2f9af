"""``wbx shell``: an interactive terminal inside a sandbox tier (seed 003's PTY).

The tier's driver opens a sandbox whose guest agent serves terminal sessions
(``open_shell(ShellRequest)``; tiers that offer it list ``shell`` in their kinds); this
command relays the host terminal to one session over PtyOpen/PtyData/PtyResize/PtyClose
frames (the terminal service's ``attach``: ``wbcore_runtime.contract.terminal``, served by
wbcore-terminal) and exits with the session's exit code.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

import typer

from wbcore_runtime.contract import lazy
from wbcore_runtime.contract.errors import Internal, InvalidArgs, NotFound

if TYPE_CHECKING:
    from wbcore_runtime.contract import terminal
    from wbcore_runtime.dispatch import mounts as _mounts
else:  # imported on first use: keeps wbx start-up light (a command loads only what it uses)
    _mounts = lazy.module("wbcore_runtime.dispatch.mounts")
    terminal = lazy.module("wbcore_runtime.contract.terminal")


def shell_tier(runtime: Any, name: str) -> Any:
    """The tier record ``wbx shell --tier name`` uses, or an error saying which tiers can."""
    able = [t for t in runtime.tiers if "shell" in t.kinds]
    for tier in able:
        if tier.name == name:
            avail = tier.available()
            if not avail.ok:
                raise NotFound(f"wbx shell: tier {name} is unavailable here: {avail.reason}")
            return tier
    names = ", ".join(t.name for t in able) or "none installed (pip install wbcore-container)"
    raise InvalidArgs(f"wbx shell: tier {name!r} offers no interactive shell; tiers that do: {names}")


def run_shell(runtime: Any, tier_name: str, mounts: list[str], program: str, args: list[str], timeout: float,
              stdin_fd: int = 0, stdout_fd: int = 1) -> int:
    parsed = _mounts.parse_mounts(mounts, home=runtime.home)
    if not 0 < timeout <= 86400:
        raise InvalidArgs(f"wbx shell: --timeout must be within (0, 86400] seconds, got {timeout:g}")
    request = terminal.ShellRequest(program=program, args=tuple(args), mounts=tuple(parsed),
                                    timeout_s=timeout)
    driver = shell_tier(runtime, tier_name).factory(runtime)
    pty = terminal.service(runtime)
    sandbox: terminal.ShellSandbox = driver.open_shell(request)
    try:
        return pty.attach(sandbox.channel, sandbox.secret, request, stdin_fd=stdin_fd, stdout_fd=stdout_fd,
                          deadline=time.monotonic() + timeout)
    except terminal.PtyError as exc:
        raise Internal(f"wbx shell: {exc}") from None
    finally:
        sandbox.close()


def register(app: typer.Typer, runtime: Any) -> None:
    @app.command("shell", context_settings={"allow_interspersed_args": False})
    def shell(
        tier: str = typer.Option("container", "--tier",
                                 help="A tier that offers shells (container, microvm)."),
        mount: list[str] = typer.Option([], "--mount",
                                        help="HOST:GUEST[:ro|rw] folder to bind in (repeatable)."),
        program: str = typer.Option("/bin/sh", "--program",
                                    help="The program to start (the tier's allowlist)."),
        timeout: float = typer.Option(3600.0, "--timeout", help="Seconds before the sandbox is ended."),
        args: list[str] | None = typer.Argument(None, metavar="[-- ARGS]..."),
    ) -> None:
        """An interactive shell inside a sandbox tier; exits with the shell's exit code."""
        sys.stdout.flush()
        code = run_shell(runtime, tier, list(mount), program, list(args or ()), timeout)
        if code:
            raise typer.Exit(code)
