"""``wbx toolkit build <id> [which]``: compile in the lane, store, register (seed 000)."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Self

import typer

from wbcore_runtime.contract.cli_output import emit_json
from wbcore_runtime.contract import lazy
from wbcore_runtime.contract.errors import InvalidArgs

if TYPE_CHECKING:
    from wbcore_runtime.contract.host import RuntimeServices
    from wbcore_runtime.build import builder
else:  # imported on first use: keeps wbx start-up light (a command loads only what it uses)
    builder = lazy.module("wbcore_runtime.build.builder")

#: On a TTY, the current phase is re-printed with its elapsed time this often while a
#: step runs long (a first zig/go build compiles for minutes without a line of its own).
TICK_S = 4.0


def interactive() -> bool:
    """Whether stderr is a terminal a person watches (the ticker runs only then)."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    """The build's progress on the CLI: phase lines on stderr (plus a ticker on a TTY), or
    one JSON event per line on stdout with ``--json`` (docs/build.md)."""

    def __init__(self, *, as_json: bool, tick: bool) -> None:
        self.as_json = as_json
        self.t0 = time.perf_counter()
        self.phase = ""
        self.since = self.t0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker = (threading.Thread(target=self._tick, name="wbx-build-ticker", daemon=True)
                        if tick else None)

    def __enter__(self) -> Self:
        if self._ticker is not None:
            self._ticker.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=TICK_S)

    def __call__(self, phase: str, detail: str) -> None:
        now = time.perf_counter()
        with self._lock:
            self.phase, self.since = phase, now
            if self.as_json:
                sys.stdout.write(json.dumps({"event": "phase", "phase": phase, "detail": detail,
                                             "elapsed": round(now - self.t0, 3)}, ensure_ascii=False) + "\n")
                sys.stdout.flush()
            else:
                print(f"  {now - self.t0:6.2f}s {phase:<8} {detail}", file=sys.stderr, flush=True)

    def _tick(self) -> None:
        while not self._stop.wait(TICK_S):
            with self._lock:
                now = time.perf_counter()
                if self.phase and now - self.since >= 1.0:  # a step past a second: say it is still running
                    print(f"  {now - self.t0:6.2f}s {self.phase:<8} … still working ({now - self.since:.0f}s "
                          "in this step)", file=sys.stderr, flush=True)


def register(app: typer.Typer, runtime: RuntimeServices) -> None:
    @app.command("build")
    def build(
        ident: str | None = typer.Argument(None, metavar="ID"),
        which: str | None = typer.Argument(None, metavar="[WHICH]",
                                           help="command or kernel (default: from #+EXEC)"),
        all_: bool = typer.Option(False, "--all", help="Build every buildable toolkit on the search path, "
                                  "one line each; go on past failures, exit 1 if any failed."),
        force: bool = typer.Option(False, "--force",
                                   help="Rebuild even when the build cache has this source."),
        replace_command: str | None = typer.Option(
            None, "--replace-command", metavar="NAME",
            help="Take over NAME, which another toolkit registered (audited)."),
        json_: bool = typer.Option(False, "--json",
                                   help="Stream one JSON object per line: phase events, then the result."),
    ) -> None:
        """Build a toolkit's artifact in its lane, store it by sha256 and register it."""
        if all_:
            if ident is not None or which is not None or replace_command is not None:
                raise InvalidArgs("--all builds every buildable toolkit: give no ID, WHICH or "
                                  "--replace-command")
            # each buildable toolkit (#+EXEC and #+BUILD_SRC) in search-path order, built as its line prints
            build_all((builder.build_row(runtime, tk.id, force=force)
                       for tk in runtime.discover().toolkits.values()
                       if builder.wants_build(tk.manifest)), json_=json_)
            return
        if ident is None:
            raise InvalidArgs("give a toolkit ID, or --all")

        if not json_:
            print(f"building {ident}", file=sys.stderr, flush=True)
        try:
            with Progress(as_json=json_, tick=not json_ and interactive()) as progress:
                result = builder.build(runtime, ident, which, progress=progress, force=force,
                                       replace_command=replace_command)
        except builder.BuildFailed as exc:
            if exc.log:
                tail = exc.log.rstrip("\n").splitlines()[-40:]
                print("--- build log (last lines) ---", file=sys.stderr)
                print("\n".join(tail), file=sys.stderr)
            raise
        if json_:
            # The last line of the stream: the result object, one line like every event.
            sys.stdout.write(json.dumps({"event": "result", **result.as_dict()}, ensure_ascii=False,
                                        default=str) + "\n")
            return
        how = "cached" if result.cached else "built"
        typer.echo(f"{result.kind} {result.name} {how} in {result.seconds:.2f}s → {result.sha256}")
        if result.kind == "component":
            typer.echo(f"  call it: wbx call {result.toolkit}.<function> --args '{{...}}' (list: wbx mcp "
                       f"tools --only {result.toolkit})")
        else:
            typer.echo("  run it: " + (f"wbx run {result.name}" if result.kind == "command"
                                       else f"wbx kernel run {result.name}"))


def build_line(row: dict[str, Any]) -> str:
    """One ``builder.build_row`` as the line ``--all`` (and ``wbx toolkit push``) prints."""
    tid, state = row["toolkit"], row["state"]
    if state == "skipped":
        return f"- {tid}: skipped: {row['error']}"
    if state == "failed":
        return f"✗ {tid}: {row['kind']}: {row['error']}"
    return (f"✓ {tid}: {row['kind']} {row['name']} {state} in {float(row['seconds']):.2f}s → "
            f"{str(row['sha256'])[:12]}…")


def build_all(built: Iterable[dict[str, Any]], *, json_: bool) -> None:
    """``wbx toolkit build --all``: one line per ``builder.build_row`` of ``built`` (✓ built or
    cached, ✗ failed with the reason, - skipped when its lane cannot run here); exit 1 if any failed."""
    rows: list[dict[str, Any]] = []
    for row in built:
        rows.append(row)
        if not json_:
            typer.echo(build_line(row))
    failed = sum(1 for r in rows if r["state"] == "failed")
    if json_:
        emit_json(rows)
    else:
        counts = {state: sum(1 for r in rows if r["state"] == state)
                  for state in ("built", "cached", "skipped")}
        typer.echo(f"{len(rows)} buildable toolkit(s): {counts['built']} built, {counts['cached']} cached, "
                   f"{counts['skipped']} skipped, {failed} failed")
    if failed:
        raise typer.Exit(1)
