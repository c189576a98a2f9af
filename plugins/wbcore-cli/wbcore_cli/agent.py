"""``wbx agent``: agent definitions in Org, the toolkit index injected into their prompt, and
runs of the agent loop (``run``, ``promote``) through ``runtime.agents`` (a plugin: wbcore-agent)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from wbcore_runtime.contract.cli_output import JSON_HELP, emit_json
from wbcore_runtime.contract.cli_output import warn
from wbcore_cli.toolkit import searched_hint
from wbcore_runtime.contract import lazy
from wbcore_runtime.contract.errors import WbError
from wbcore_runtime.trust import verdict as _trust

if TYPE_CHECKING:
    from wbcore_runtime.contract.host import RuntimeServices
    from wbcore_cli import engine_client
else:  # imported on first use: keeps wbx start-up light (a command loads only what it uses)
    # urllib.request brings http.client and email, which a local run never needs
    engine_client = lazy.Module("wbcore_cli.engine_client")


def build(runtime: RuntimeServices) -> typer.Typer:
    app = typer.Typer(no_args_is_help=True, add_completion=False, rich_markup_mode=None)

    @app.command("prompt")
    def prompt_cmd(
        path: Path = typer.Argument(..., help="An agent definition (.org) with an :agent: node."),
        json_: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Print the agent's system prompt with its toolkit index injected."""
        agent = runtime.agents.load(path)
        found = runtime.discover()
        text = runtime.agents.prompt(agent)
        _warn_missing(runtime, agent.toolkits, found)
        if json_:
            data = agent.as_dict()
            data["prompt"] = text
            data["index"] = [t for t in agent.toolkits if _known(runtime, t)]
            emit_json(data)
        else:
            typer.echo(text)

    @app.command("run")
    def run_cmd(
        agent: str = typer.Argument(..., help="An agent definition (.org) or an agent id (agents/<id>.org)."),
        task: str = typer.Argument("", help="The task. Omit with --resume."),
        model: str = typer.Option(None, "--model",
                                  help="provider:model or a model name (else :MODEL:, WB_LLM_MODEL)."),
        max_steps: int = typer.Option(12, "--max-steps", help="Steps before the run ends with max-steps."),
        tool_timeout: float = typer.Option(150.0, "--tool-timeout", help="Seconds one tool call may take."),
        max_calls: int = typer.Option(16, "--max-calls",
                                      help="Tool calls of one reply that run (the rest are refused)."),
        run_timeout: float = typer.Option(1800.0, "--run-timeout",
                                          help="The run's wall-clock budget in seconds."),
        workdir: Path = typer.Option(None, "--workdir",
                                     help="Where _steps.jsonl goes (default under $WB_HOME/agents/runs)."),
        resume: str = typer.Option(None, "--resume", metavar="RUN_ID",
                                   help="Continue a crashed run from its VFS."),
        allow_build: bool = typer.Option(False, "--allow-build",
                                         help="Grant the build cap: the agent may make toolkits."),
        exec_grant: bool = typer.Option(False, "--exec",
                                        help="The exec trust grant: host-brokered exec-only tools."),
        engine: str = typer.Option(None, "--engine",
                                   help="Run it as a session on this engine (http://host:port) instead."),
        detach: bool = typer.Option(False, "--detach",
                                    help="With --engine: print the session id and return."),
        token: str = typer.Option(None, "--token", envvar="WB_ENGINE_TOKEN", show_envvar=True,
                                  help="With --engine: the engine's bearer token."),
        json_: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Run an agent on a task: steps stream to stderr, the result to stdout (or, with
        --engine, as a session on a running engine, following its events)."""
        import sys

        if engine is not None:
            options: dict = {"max_steps": max_steps, "tool_timeout": tool_timeout, "max_calls": max_calls,
                             "run_timeout": run_timeout}
            if model:
                options["model"] = model
            raise typer.Exit(engine_client.run_on_engine(engine, agent, task, token=token or None,
                                                         options=options, follow=not detach, json_=json_))

        def show(step: dict) -> None:
            if "event" in step:
                return
            names = ", ".join(c["name"] for c in step.get("tool_calls", [])) or "(answer)"
            print(f"step {step['step']}: {names}", file=sys.stderr)

        rec = runtime.agent(agent, task or None, model=model, max_steps=max_steps, tool_timeout=tool_timeout,
                            max_calls=max_calls, run_timeout=run_timeout, workdir=workdir, resume=resume,
                            allow_build=allow_build, exec_grant=exec_grant, on_step=None if json_ else show)
        if json_:
            emit_json(rec.as_dict())
        else:
            typer.echo(rec.result if rec.result is not None else "")
            print(f"{rec.status} after {rec.steps} step(s); tokens in/out {rec.usage.input_tokens}/"
                  f"{rec.usage.output_tokens}{' (estimated)' if rec.usage.estimated else ''}; "
                  f"steps in {rec.workdir / '_steps.jsonl'}", file=sys.stderr)
            if rec.error:
                print(f"wbx: {rec.error}", file=sys.stderr)
        if rec.status != "done":
            raise typer.Exit(124 if rec.status in ("max-steps", "timeout") else 70)

    @app.command("promote")
    def promote_cmd(
        run_id: str = typer.Argument(..., help="The run that made the toolkit."),
        toolkit: str = typer.Argument(..., help="The session toolkit's id."),
        to: str = typer.Option("workspace", "--to",
                               help="workspace (signed, bundle-ready) or installed (verify-then-land)."),
        json_: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Promote a toolkit an agent made: session → workspace → installed, each step audited."""
        got = runtime.agents.promote(run_id, toolkit, to=to)
        if json_:
            emit_json(got.as_dict())
        else:
            typer.echo(f"{got.toolkit}: {got.stage} at {got.path} (sha256 {got.sha256[:16]}…)")

    return app


def _warn_missing(runtime: RuntimeServices, names: tuple[str, ...] | list[str], found: object) -> None:
    """One stderr line per declared toolkit left out of the index, and why; with the
    search hint when none was found at all (the prompt alone would look complete)."""
    missing = []
    for name in names:
        try:
            tk = found.get(name)  # type: ignore[attr-defined]
        except WbError as exc:
            missing.append(name)
            warn(f"agent toolkit {name!r} left out of the index: {exc.message}")
            continue
        why = _trust.unavailable_reason(tk, runtime)
        if why:
            warn(f"agent toolkit {name!r} left out of the index: unavailable: {why}")
    if missing and not found.toolkits:  # type: ignore[attr-defined]
        warn(searched_hint(runtime))


def _known(runtime: RuntimeServices, ident: str) -> bool:
    """Found and available: the toolkits the injected index lists."""
    try:
        tk = runtime.toolkit(ident)
    except Exception:
        return False
    return not _trust.unavailable_reason(tk, runtime)
