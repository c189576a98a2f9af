"""Entry point of wbcore-act: the tool provider (``wbcore_tool_providers``) and the ``wbx call`` /
``wbx act`` commands. Imports nothing heavy."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from wbcore_runtime import hookimpl
from wbcore_runtime.contract.records import ToolProviderService


def _service(runtime: Any) -> Any:
    from wbcore_act.service import ActToolService

    return ActToolService(runtime)


@hookimpl
def wbcore_tool_providers() -> Iterator[ToolProviderService]:
    yield ToolProviderService(name="act", summary="every registered toolkit as ACT tools", factory=_service)


@hookimpl
def wbcore_cli_commands(add: Any) -> None:
    from wbcore_act import cli

    add("call", cli.build(add.runtime),
        help="Call one tool with JSON arguments, exactly as the MCP server would.")
    add("act", cli.build_act(add.runtime),
        help="The ACT view: tools as ACT tool-definitions; a binary's act:* sections.")
