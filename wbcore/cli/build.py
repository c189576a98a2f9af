"""``wbx toolkit build <id> [which]``: compile in the lane, store, register (seed 000)."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

import typer

from wbcore.cli.output import JSON_HELP, emit_json

if TYPE_CHECKING:
    from wbcore.runtime import Runtime

STAGES = ("resolve", "fetch", "cache", "compile", "store", "register")


def register(app: typer.Typer, runtime: Runtime) -> None:
    @app.command("build")
    def build(
        ident: str = typer.Argument(..., metavar="ID"),
        which: str | None = typer.Argument(None, metavar="[WHICH]", help="command or kernel (default: from #+EXEC)"),
        force: bool = typer.Option(False, "--force", help="Rebuild even when the build cache has this source."),
        replace_command: str | None = typer.Option(
            None, "--replace-command", metavar="NAME",
            help="Take over NAME, which another toolkit registered (audited)."),
        json_: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Build a toolkit's artifact in its lane, store it by sha256 and register it."""
        from wbcore import builder
        from wbcore.build import BuildFailed

        t0 = time.perf_counter()

        def progress(stage: str, detail: str) -> None:
            if not json_:
                print(f"  {time.perf_counter() - t0:6.2f}s {stage:<8} {detail}", file=sys.stderr, flush=True)

        if not json_:
            print(f"building {ident}", file=sys.stderr, flush=True)
        try:
            result = builder.build(runtime, ident, which, progress=progress, force=force,
                                   replace_command=replace_command)
        except BuildFailed as exc:
            if exc.log:
                tail = exc.log.rstrip("\n").splitlines()[-40:]
                print("--- build log (last lines) ---", file=sys.stderr)
                print("\n".join(tail), file=sys.stderr)
            raise
        if json_:
            emit_json(result.as_dict())
            return
        how = "cached" if result.cached else "built"
        typer.echo(f"{result.kind} {result.name} {how} in {result.seconds:.2f}s → {result.sha256}")
        if result.kind == "component":
            typer.echo(f"  call it: wbx call {result.toolkit}.<function> --args '{{...}}' (list: wbx mcp tools --only {result.toolkit})")
        else:
            typer.echo("  run it: " + (f"wbx run {result.name}" if result.kind == "command" else f"wbx kernel run {result.name}"))
