"""``wbx audit [--verify] [--tail N] [--json]``: show the Dock's audit trail, check its chain."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from wbcore_runtime.contract.cli_output import JSON_HELP, emit_json
from wbcore_runtime.contract.errors import Internal
from wbcore_runtime.contract import audit_trail
from wbcore_runtime.dispatch.audit import AuditLog

if TYPE_CHECKING:
    from wbcore_runtime.contract.host import RuntimeServices


def _line(e: dict) -> str:
    if "unparseable" in e:
        return f"?      unparseable: {e['unparseable']}"
    why = f" {e.get('kind')}: {e.get('reason')}" if e.get("outcome") != "allowed" else ""
    target = f" {e['target']}" if e.get("target") else ""
    return (f"{e.get('seq'):>6} {e.get('principal')} {e.get('cap')}.{e.get('op')} {e.get('outcome')}{why}"
            f"{target} {e.get('bytes')}B {e.get('ms')}ms")


def register(app: typer.Typer, runtime: RuntimeServices) -> None:
    @app.command("audit")
    def audit(
        verify: bool = typer.Option(False, "--verify", help="Check the hash chain; exit 70 if it is broken."),
        tail: int = typer.Option(50, "--tail", help="Show the last N decisions (0 = all)."),
        principal: str = typer.Option("", "--principal", help="Only this principal (tenant/toolkit)."),
        cap: str = typer.Option("", "--cap", help="Only this cap."),
        denied: bool = typer.Option(False, "--denied", help="Only denied decisions."),
        json_: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Show the Dock's audit trail (every broker decision, allowed and denied)."""
        trail = audit_trail.service(runtime)  # the reader (wbcore-audit-trail)
        log = AuditLog.for_home(runtime.home, runtime.env)  # the writer the reader reads
        if verify:
            problems = trail.verify(log)
            count = sum(1 for _ in trail.entries(log))
            if json_:
                emit_json({"ok": not problems, "entries": count, "problems": [str(p) for p in problems]})
            elif not problems:
                typer.echo(f"✓ audit chain intact: {count} entries")
            if problems:
                if not json_:
                    for p in problems:
                        typer.echo(f"✗ {p}")
                raise Internal(f"audit chain broken: {len(problems)} problem(s) in {log.dir}")
            return
        entries = [e for e in trail.entries(log)
                   if (not principal or e.get("principal") == principal) and (not cap or e.get("cap") == cap)
                   and (not denied or e.get("outcome") == "denied")]
        if tail > 0:
            entries = entries[-tail:]
        if json_:
            emit_json(entries)
            return
        if not entries:
            typer.echo(f"no audit entries under {log.dir}" + (" match" if principal or cap or denied else ""))
        for e in entries:
            typer.echo(_line(e))
