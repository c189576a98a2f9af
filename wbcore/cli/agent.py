"""``wbx agent``: agent definitions in Org and the toolkit index injected into their prompt."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from wbcore.cli.output import JSON_HELP, emit_json

if TYPE_CHECKING:
    from wbcore.runtime import Runtime


def build(runtime: Runtime) -> typer.Typer:
    app = typer.Typer(no_args_is_help=True, add_completion=False, rich_markup_mode=None)

    @app.command("prompt")
    def prompt_cmd(
        path: Path = typer.Argument(..., help="An agent definition (.org) with an :agent: node."),
        json_: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Print the agent's system prompt with its toolkit index injected."""
        from wbcore import agents
        from wbcore import trust as _trust

        agent = agents.load(path)
        text = agents.prompt(agent, runtime.discover(), lambda tk: _trust.unavailable_reason(tk, runtime))
        if json_:
            data = agent.as_dict()
            data["prompt"] = text
            data["index"] = [t for t in agent.toolkits if _known(runtime, t)]
            emit_json(data)
        else:
            typer.echo(text)

    return app


def _known(runtime: Runtime, ident: str) -> bool:
    """Found and available: the toolkits the injected index lists."""
    from wbcore import trust

    try:
        tk = runtime.toolkit(ident)
    except Exception:
        return False
    return not trust.unavailable_reason(tk, runtime)


def register(app: typer.Typer, runtime: Runtime) -> None:
    app.add_typer(build(runtime), name="agent", help="Agent definitions: the prompt with its toolkit index.")
