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
        found = runtime.discover()
        text = agents.prompt(agent, found, lambda tk: _trust.unavailable_reason(tk, runtime))
        _warn_missing(runtime, agent.toolkits, found)
        if json_:
            data = agent.as_dict()
            data["prompt"] = text
            data["index"] = [t for t in agent.toolkits if _known(runtime, t)]
            emit_json(data)
        else:
            typer.echo(text)

    from wbcore.cli import engine as _engine_cli

    _engine_cli.register_agent_run(app, runtime)  # --engine: a session on wbx engine serve
    return app


def _warn_missing(runtime: Runtime, names: tuple[str, ...] | list[str], found: object) -> None:
    """One stderr line per declared toolkit left out of the index, and why; with the
    search hint when none was found at all (the prompt alone would look complete)."""
    from wbcore import trust
    from wbcore.cli.output import warn
    from wbcore.cli.toolkit import searched_hint
    from wbcore.errors import WbError

    missing = []
    for name in names:
        try:
            tk = found.get(name)  # type: ignore[attr-defined]
        except WbError as exc:
            missing.append(name)
            warn(f"agent toolkit {name!r} left out of the index: {exc.message}")
            continue
        why = trust.unavailable_reason(tk, runtime)
        if why:
            warn(f"agent toolkit {name!r} left out of the index: unavailable: {why}")
    if missing and not found.toolkits:  # type: ignore[attr-defined]
        warn(searched_hint(runtime))


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
