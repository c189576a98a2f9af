"""``wbx demo``: walk the shipped toolkits through what works today."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from wbcore.runtime import Runtime


def register(app: typer.Typer, runtime: Runtime) -> None:
    @app.command("demo")
    def demo() -> None:
        """Discover, show and verify the shipped toolkits."""
        found = runtime.discover()
        typer.echo(f"== discover: {len(found.toolkits)} toolkit(s) in {', '.join(map(str, found.roots))}")
        for tk in found.toolkits.values():
            typer.echo(f"  {tk.id} · {tk.manifest.status} · {tk.manifest.exec or 'discovery-only'} · {tk.manifest.tagline}")
        for err in found.errors:
            typer.echo(f"  (malformed) {err}")
        failed = 0
        for tk in found.toolkits.values():
            typer.echo(f"\n== verify {tk.id}")
            report = runtime.verify(tk.id)
            typer.echo(report.render())
            failed += not report.ok
            if tk.skills:
                first = tk.skills[0]
                typer.echo(f"-- skill {tk.id}/{first.slug}: {first.summary}")
        typer.echo(f"\n== {len(found.toolkits) - failed} of {len(found.toolkits)} toolkit(s) verified")
        if failed:
            raise typer.Exit(1)
