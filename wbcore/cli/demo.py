"""``wbx demo``: walk the shipped toolkits through what works today: discover, build,
run (commands, kernels, the ``upper`` built-in) and verify."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from wbcore.runtime import Runtime


def register(app: typer.Typer, runtime: Runtime) -> None:
    @app.command("demo")
    def demo() -> None:
        """Discover the shipped toolkits, build and run the buildable ones, verify all."""
        from wbcore import buildable

        found = runtime.discover()
        typer.echo(f"== discover: {len(found.toolkits)} toolkit(s) in {', '.join(map(str, found.roots))}")
        for tk in found.toolkits.values():
            typer.echo(f"  {tk.id} · {tk.manifest.status} · {tk.manifest.exec or 'discovery-only'} · {tk.manifest.tagline}")
        for err in found.errors:
            typer.echo(f"  (malformed) {err}")
        failed, built = _build_and_run(runtime, found)
        for tk in found.toolkits.values():
            typer.echo(f"\n== verify {tk.id}")
            report = runtime.verify(tk.id)
            typer.echo(report.render())
            missing = [e for e in buildable.refusals(runtime, tk.manifest) if isinstance(e, buildable.LaneUnavailable)]
            if missing and not report.ok:  # explained, not a failure of the demo: this machine lacks the lane
                typer.echo(f"-- {tk.id} cannot be built on this machine: {missing[0].message}")
            failed += not report.ok and not missing
            if tk.skills:
                first = tk.skills[0]
                typer.echo(f"-- skill {tk.id}/{first.slug}: {first.summary}")
        typer.echo(f"\n== {len(found.toolkits)} toolkit(s) verified; {failed} step(s) failed")
        typer.echo(next_steps(runtime, built))
        if failed:
            raise typer.Exit(1)


DEMO_INPUT = "hello from wbx demo\n"


def next_steps(runtime: Runtime, built: list[tuple[str, str]]) -> str:
    """The closing lines: which home the demo used, and commands that work as printed in a
    new shell (an absolute ``cd``, the venv's own ``wbx``, ``WB_HOME`` only when it chose)."""
    import os
    import shlex
    import sys
    from pathlib import Path

    from wbcore import home as _home

    chosen = _home.choose(runtime.env, runtime.cwd)
    if chosen.path.resolve() != runtime.home.resolve():  # an embedder passed home= explicitly
        chosen = _home.Home(runtime.home, "WB_HOME")
    lines = [f"\n== home: {chosen.describe()}"]
    exe = Path(sys.executable).parent / "wbx"
    wbx = str(exe) if exe.is_file() else "wbx"
    cwd = Path(os.path.abspath(runtime.cwd))
    if exe.is_file() and exe.is_relative_to(cwd):
        wbx = str(exe.relative_to(cwd))
    lines.append("next, in a new shell:")
    lines.append(f"  cd {shlex.quote(str(cwd))}")
    if chosen.source == "WB_HOME":
        lines.append(f"  export WB_HOME={shlex.quote(str(chosen.path))}")
    lines.append(f"  {wbx} toolkit list")
    commands = [name for kind, name in built if kind == "command"]
    if commands:
        first = "b64" if "b64" in commands else commands[0]
        lines.append(f"  echo hello | {wbx} run {first}")
    kernels = [name for kind, name in built if kind == "kernel"]
    if kernels:
        lines.append(f"  echo hello | {wbx} kernel run {kernels[0]}")
    shown = next((tk for tk in runtime.discover().toolkits.values() if tk.skills), None)
    if shown is not None:
        lines.append(f"  {wbx} toolkit show {shown.id} {shown.skills[0].slug}")
    from importlib.util import find_spec

    if find_spec("wb_mcp") is not None:
        lines.append(f"  {wbx} mcp serve   # the built commands as MCP tools over stdio")
    return "\n".join(lines)


def _build_and_run(runtime: Runtime, found: object) -> tuple[int, list[tuple[str, str]]]:
    """Build every command/kernel toolkit whose lane is available, run each once (stdin
    ``#+DEMO_STDIN``, arguments ``#+DEMO_ARGS``, both optional), and call the built-in
    ``upper``. Returns how many steps failed (a command's own exit code is only shown)
    and the (kind, name) of each artifact it registered."""
    from wbcore import builder
    from wbcore.errors import WbError

    typer.echo("\n== build & run (wbx toolkit build <id>; wbx run / wbx kernel run)")
    failed = 0
    built: list[tuple[str, str]] = []
    for tk in found.toolkits.values():  # type: ignore[attr-defined]
        m = tk.manifest
        if m.exec not in ("command", "kernel") or not m.build_src:
            continue
        lane = m.build_lang
        if lane and (lane not in runtime.lanes or not runtime.lanes.get(lane).availability(runtime).ok):
            typer.echo(f"  {tk.id}: skipped (lane {lane} not available here)")
            continue
        try:
            res = builder.build(runtime, tk.id)
            built.append((res.kind, res.name))
            how = "cached" if res.cached else "built"
            typer.echo(f"  {tk.id}: {res.kind} {res.name} {how} by lane {res.lane or 'prebuilt'} in {res.seconds:.2f}s"
                       f" → {res.sha256[:12]}…")
            stdin = (m.extra("DEMO_STDIN") or DEMO_INPUT.rstrip("\n")).encode() + b"\n"
            args = (m.extra("DEMO_ARGS") or "").split()
            if res.kind == "command":
                out = runtime.call(res.name, args, stdin)
                text = (out.stdout or out.stderr).decode("utf-8", "replace").strip()
                shown = (text.splitlines() or [""])[0][:80]
                typer.echo(f"    $ echo {stdin.decode().strip()!r} | wbx run {' '.join([res.name, *args])}  →  {shown}"
                           f"  (exit {out.exit_code}, {out.usage.wall_s * 1e3:.2f} ms)")
            else:
                body = runtime.kernel_call(res.name, stdin)
                typer.echo(f"    $ echo {stdin.decode().strip()!r} | wbx kernel run {res.name}  →  "
                           f"{body.decode('utf-8', 'replace')[:80]}")
        except WbError as exc:
            failed += 1
            typer.echo(f"  {tk.id}: FAILED: {exc.kind.value}: {exc.message}")
    try:
        out = runtime.call("upper", [], DEMO_INPUT.encode())
        typer.echo(f"  built-in upper (WAT-built WASM): {out.stdout.decode().strip()}")
    except WbError as exc:
        failed += 1
        typer.echo(f"  built-in upper: FAILED: {exc.message}")
    return failed, built
