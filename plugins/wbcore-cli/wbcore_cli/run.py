"""``wbx run <name> [args…]`` through Typer: its help, and the option forms the plain parser
(cli/fastrun.py, which runs it otherwise) leaves to Typer. stdin → the command → stdout/stderr;
the command's exit code is wbx's. ``wbx kernel`` and ``wbx commands`` are cli/registered.py's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from wbcore_cli.fastrun import MOUNT_HELP, RunArgs
from wbcore_cli.fastrun import run as run_command

if TYPE_CHECKING:
    from wbcore_runtime.contract.host import RuntimeServices


def register(app: typer.Typer, runtime: RuntimeServices) -> None:
    @app.command(
        "run",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True,
                          "allow_interspersed_args": False},
    )
    def run(
        name: str = typer.Argument(..., metavar="NAME"),
        args: list[str] | None = typer.Argument(None, metavar="[ARGS]..."),
        timeout: float | None = typer.Option(None, "--timeout", help="Seconds (at most the profile's)."),
        tier: str | None = typer.Option(None, "--tier",
                                        help="Isolation tier (default: from #+TRUST; see wbx tiers "
                                             "--explain)."),
        verbose: bool = typer.Option(False, "-v", "--verbose",
                                     help="Then one stderr line: the tier it ran at, its isolation "
                                          "(kvm/tcg), time, memory."),
        as_json: bool = typer.Option(False, "--json",
                                     help="Print one JSON object instead: exit code, stdout, stderr, usage "
                                          "(tier, isolation, time, memory), or the error's kind and "
                                          "message."),
        mount: list[str] = typer.Option([], "--mount", metavar="HOST[:GUEST][:ro|rw]", help=MOUNT_HELP),
    ) -> None:
        """Run a registered command: stdin → stdout; its exit code passes through.

        wbx's options go before NAME; every word after NAME is the program's (one `--` after
        NAME is dropped as the separator)."""
        code = run_command(runtime,
                           RunArgs(name, tuple(args or ()), timeout, tier, verbose, as_json, tuple(mount)))
        if code:
            raise typer.Exit(code)
