"""The ``wbx toolkit`` subcommands beyond list, show, search and verify: sign, grant, revoke,
install, uninstall (cli/provenance.py), build (cli/build.py), push (to a running engine, through
cli/engine_client.py) and ``run`` (a task recipe). cli/toolkit.py imports this module only when
one of them runs, or for help, so ``wbx toolkit list`` loads none of them."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from wbcore_cli import build, provenance
from wbcore_runtime.contract.cli_output import JSON_HELP, emit_json
from wbcore_cli.fastrun import MOUNT_HELP, guest_args, read_stdin
from wbcore_runtime.contract import lazy

if TYPE_CHECKING:
    from wbcore_runtime.contract.host import RuntimeServices
    from wbcore_cli import engine_client
    from wbcore_runtime.toolkit import tasks
else:  # imported on first use: keeps wbx start-up light (a command loads only what it uses)
    # urllib.request brings http.client and email, which no other command loads
    engine_client = lazy.Module("wbcore_cli.engine_client")
    # it brings dispatch (resolve, mounts, audit), which wbx --help does not load
    tasks = lazy.module("wbcore_runtime.toolkit.tasks")


TOKEN_HELP = "The engine's bearer token (else $WB_ENGINE_TOKEN)."


def register(app: typer.Typer, runtime: RuntimeServices) -> None:
    provenance.register(app, runtime)
    build.register(app, runtime)

    @app.command("push")
    def push(
        ident: str = typer.Argument(..., metavar="ID", help="A toolkit id on this machine's search path."),
        engine: str = typer.Argument(..., metavar="ENGINE_URL", help="e.g. http://127.0.0.1:8766"),
        dry_run: bool = typer.Option(False, "--dry-run",
                                     help="Show the diff of caps, trust and signer; land nothing."),
        force: bool = typer.Option(False, "--force",
                                   help="Replace the toolkit if the engine has it installed."),
        first_party: bool = typer.Option(False, "--first-party",
                                         help="Vouch for a first-party toolkit (it gets its profile's caps "
                                              "there)."),
        no_build: bool = typer.Option(False, "--no-build",
                                      help="Land it only; build later (POST /v1/toolkits/ID/build)."),
        token: str = typer.Option(None, "--token", envvar="WB_ENGINE_TOKEN", show_envvar=True,
                                  help=TOKEN_HELP),
        json_: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Ship a toolkit onto a running engine: verified there, then landed (all or nothing),
        then built in the engine's own build sandbox so its commands answer at once."""
        tk = runtime.toolkit(ident)
        archive = engine_client.toolkit_archive(Path(tk.dir), tk.id)
        answer = engine_client.push(engine, archive, name=f"{tk.id}.tar.gz", token=token or None,
                                    dry_run=dry_run, force=force, first_party=first_party, build=not no_build)
        if json_:
            emit_json(answer)
            return
        if answer.get("dry_run"):
            for change in answer.get("changes", []):
                for line in change.get("diff", []):
                    typer.echo(line)
            typer.echo("(dry run: nothing landed)")
            return
        for item in answer.get("installed", []):
            verb = "unchanged" if item.get("unchanged") else "installed"
            signer = f", signed by {item['signer']}" if item.get("signer") else ""
            typer.echo(f"{verb} {item['id']} {item['version']} on {engine} ({item['trust']}{signer}); "
                       f"requests caps: {' '.join(item.get('caps', [])) or 'none'}")
        rows = answer.get("builds", [])
        for row in rows:
            typer.echo(f"  build on the engine: {build.build_line(row)}")
        if any(row.get("state") == "failed" for row in rows):
            raise typer.Exit(1)

    @app.command(
        "run",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True,
                          "allow_interspersed_args": False},
    )
    def run_task(
        ident: str = typer.Argument(..., metavar="ID"),
        task: str = typer.Argument(..., metavar="TASK"),
        args: Optional[list[str]] = typer.Argument(None, metavar="[-- ARGS]..."),
        tier: Optional[str] = typer.Option(None, "--tier",
                                           help="A sandbox tier that runs tasks (default: the weakest)."),
        timeout: Optional[float] = typer.Option(None, "--timeout",
                                                help="Seconds (at most the posix profile's)."),
        mount: list[str] = typer.Option([], "--mount", metavar="HOST[:GUEST][:ro|rw]", help=MOUNT_HELP),
    ) -> None:
        """Run a :role task recipe inside a sandbox tier (only with WB_TOOLKIT_EXEC=1)."""
        argv, note = guest_args(args or ())
        if note:
            print(note, file=sys.stderr, flush=True)
        stdin = read_stdin() if tasks.exec_allowed(runtime.env) else b""
        result = tasks.run_task(runtime, ident, task, list(argv), stdin, tier=tier, timeout=timeout,
                                mounts=mount)
        for stream, data in ((sys.stdout, result.stdout), (sys.stderr, result.stderr)):
            stream.flush()
            raw = getattr(stream, "buffer", None)
            if raw is not None:
                raw.write(data)
                raw.flush()
            else:
                stream.write(data.decode("utf-8", "replace"))
        if result.exit_code:
            raise typer.Exit(result.exit_code)
