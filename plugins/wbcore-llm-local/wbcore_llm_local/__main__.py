"""``python -m wbcore_llm_local [--detach] …``: the same as ``wbx llm serve-local``."""

import sys

import click
import typer

from wbcore_llm_local.cli import build

if __name__ == "__main__":
    command = typer.main.get_command(build())
    # a Typer app of one command collapses into that command: its name is then no argument
    argv = ["serve-local", *sys.argv[1:]] if isinstance(command, click.Group) else sys.argv[1:]
    sys.exit(command(argv, prog_name="python -m wbcore_llm_local"))
