"""wbcore-agent-skills: Agent Skills import, audit and export as ``wbx toolkit`` commands."""

from __future__ import annotations

from typing import Any

from wbcore_runtime import hookimpl

#: The ``wbx toolkit`` subcommands this plugin serves.
COMMANDS = ("import", "audit", "export")


@hookimpl
def wbcore_cli_commands(add: Any) -> None:
    import typer

    from wbcore_agent_skills import cli

    group = typer.Typer()
    cli.register(group, add.runtime)
    for command in group.registered_commands:
        add(f"toolkit {command.name}", command.callback, help=command.help)
