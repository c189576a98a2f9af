"""Entry point of wbcore-mcp: the ``wbx mcp`` command. The ``mcp`` SDK loads only when used."""

from __future__ import annotations

from typing import Any

from wbcore_runtime import hookimpl


@hookimpl
def wbcore_cli_commands(add: Any) -> None:
    from wbcore_mcp import cli

    add("mcp", cli.build(add.runtime),
        help="Serve toolkits' tools and skills over MCP (stdio or streamable HTTP).")
