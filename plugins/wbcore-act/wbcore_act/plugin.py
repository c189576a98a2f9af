"""Entry point of wbcore-act: the ``wbx call`` and ``wbx act`` commands. Imports nothing heavy."""

from __future__ import annotations

from typing import Any

from wbcore_runtime import hookimpl


@hookimpl
def wbcore_cli_commands(add: Any) -> None:
    from wbcore_act import cli

    add("call", cli.build(add.runtime), help="Call one tool with JSON arguments, exactly as the MCP server would.")
    add("act", cli.build_act(add.runtime), help="The ACT view: tools as ACT tool-definitions; a binary's act:* sections.")
