"""Entry point of wbcore-llm-local: ``wbx llm serve-local`` (the server is imported by the command,
never at plugin import)."""

from __future__ import annotations

from typing import Any

from wbcore_runtime import hookimpl


@hookimpl
def wbcore_cli_commands(add: Any) -> None:
    from wbcore_llm_local import cli

    add("llm", cli.build(), help="Start a local model (llama.cpp, SmolLM2) on loopback for the agent loop.")
