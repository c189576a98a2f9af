"""Entry point of wbcore-engine: the ``wbx engine`` command. starlette and the HTTP server load only
when used."""

from __future__ import annotations

from typing import Any

from wbcore_runtime import hookimpl


@hookimpl
def wbcore_cli_commands(add: Any) -> None:
    from wbcore_engine import cli

    add(
        "engine", cli.build(add.runtime),
        help="Serve the engine API: toolkits, push, calls, agent sessions, audit.",
    )
