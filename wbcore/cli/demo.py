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
        found = runtime.discover()
        typer.echo(f"== discover: {len(found.toolkits)} toolkit(s) in {', '.join(map(str, found.roots))}")
        for tk in found.toolkits.values():
            typer.echo(f"  {tk.id} · {tk.manifest.status} · {tk.manifest.exec or 'discovery-only'} · {tk.manifest.tagline}")
        for err in found.errors:
            typer.echo(f"  (malformed) {err}")
        failed = _build_and_run(runtime, found)
        for tk in found.toolkits.values():
            typer.echo(f"\n== verify {tk.id}")
            report = runtime.verify(tk.id)
            typer.echo(report.render())
            failed += not report.ok
            if tk.skills:
                first = tk.skills[0]
                typer.echo(f"-- skill {tk.id}/{first.slug}: {first.summary}")
        typer.echo(f"\n== {len(found.toolkits)} toolkit(s) verified; {failed} step(s) failed")
        if failed:
            raise typer.Exit(1)


DEMO_INPUT = "hello from wbx demo\n"


def _build_and_run(runtime: Runtime, found: object) -> int:
    """Build every command/kernel toolkit whose lane is available, run each once (stdin
    ``#+DEMO_STDIN``, arguments ``#+DEMO_ARGS``, both optional), and call the built-in
    ``upper``. Returns how many steps failed (a command's own exit code is only shown)."""
    from wbcore import builder
    from wbcore.errors import WbError

    typer.echo("\n== build & run (wbx toolkit build <id>; wbx run / wbx kernel run)")
    failed = 0
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
    return failed
