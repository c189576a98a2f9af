"""``wbx toolkit import``, ``wbx toolkit audit`` and ``wbx toolkit export``: Agent Skills in and out.

Registered into the core's ``wbx toolkit`` group through ``wbcore_cli_commands``
(``add("toolkit import", ...)``); the commands act on the runtime the app is built over.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from wbcore_runtime.contract.cli_output import JSON_HELP, emit_json, warn
from wbcore_runtime.contract.errors import InvalidArgs

if TYPE_CHECKING:
    from wbcore_runtime.runtime import Runtime


def register(app: typer.Typer, runtime: Runtime) -> None:
    """Add the three commands to ``app`` (a Typer whose commands the registrar moves into
    ``wbx toolkit``)."""
    def _registered() -> list[str]:
        try:
            return runtime.registry.names("command")
        except Exception:  # an unreadable registry means nothing counts as registered
            return []

    @app.command("import")
    def import_(
        source: str = typer.Argument(
            ..., metavar="SOURCE",
            help="An Agent Skills folder (SKILL.md), a markdown file, a folder, git+… or an archive URL.",
        ),
        as_: Optional[str] = typer.Option(None, "--as", help="The toolkit id (default: the skill's name)."),
        sha256: Optional[str] = typer.Option(
            None, "--sha256", help="The archive's sha256 (required for archive URLs)."
        ),
        out: Optional[Path] = typer.Option(
            None, "-o", "--out", help="Folder to create the toolkit in (default: ./toolkits)."
        ),
        force: bool = typer.Option(False, "--force", help="Replace an existing toolkit folder."),
        json_: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Package an Agent Skills folder, a markdown file or a folder as a toolkit, then audit it."""
        from wbcore_agent_skills import native_audit, skill_import
        from wbcore_runtime.contract import installs  # with the command only: wbx --help stays light

        done = skill_import.import_source(
            source, out or runtime.cwd / "toolkits", ident=as_, force=force, sha256=sha256,
            installer=lambda: installs.service(runtime),
        )
        report = native_audit.audit(done.path, _registered())
        runtime.discover(refresh=True)
        for warning in done.warnings:
            typer.echo(f"wbx: warning: {warning}", err=True)
        if json_:
            emit_json(
                {
                    "id": done.id, "path": str(done.path), "skills": list(done.skills),
                    "copied": list(done.copied), "warnings": list(done.warnings), "audit": report.as_dict(),
                }
            )
            return
        typer.echo(f"imported {done.id} → {done.path}")
        typer.echo(f"  skills: overview {' '.join(done.skills)}".rstrip())
        if done.copied:
            typer.echo(f"  copied: {' '.join(done.copied)}")
        _print_audit(report, done.path)

    def _print_audit(report: Any, root: Path) -> None:
        if not report.findings:
            typer.echo(f"audit: nothing in {root} assumes native execution")
            return
        fixable = sum(1 for f in report.findings if f.fixable)
        hint = f" (wbx toolkit audit {root} --fix)" if fixable else ""
        typer.echo(f"audit: {len(report.findings)} finding(s), {fixable} fixable{hint}")
        for f in report.findings:
            typer.echo(f"  {f.render()}")

    @app.command("audit")
    def audit(
        folder: Path = typer.Argument(..., metavar="DIR", help="A toolkit folder (e.g. one made by import)."),
        fix: bool = typer.Option(False, "--fix", help="Rewrite what can be rewritten."),
        json_: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Report what in a toolkit folder assumes native execution; --fix rewrites what it can.

        Exits 1 while something still assumes native execution.
        """
        from wbcore_agent_skills import native_audit

        if not folder.is_dir():
            raise InvalidArgs(f"{folder} is not a folder")
        signed = "SIGNATURE:" in (
            (folder / "manifest.org").read_text(errors="replace")
            if (folder / "manifest.org").is_file()
            else ""
        )
        report = native_audit.fix(folder, _registered()) if fix else native_audit.audit(folder, _registered())
        if json_:
            emit_json(report.as_dict())
        else:
            if fix:
                typer.echo(f"fixed: {' '.join(report.fixed) or 'nothing to fix'}")
                if report.fixed and signed:
                    warn("the toolkit was signed: re-sign it (wbx toolkit sign <id>), its content changed")
            _print_audit(report, folder)
        if report.native:
            raise typer.Exit(1)

    @app.command("export")
    def export(
        idents: Optional[list[str]] = typer.Argument(None, metavar="ID...", help="Toolkits to export."),
        agent_skills: Optional[Path] = typer.Option(
            None, "-o", "--out", "--agent-skills", metavar="DIR", help="Write <DIR>/<name>/SKILL.md packages."
        ),
        index: Optional[Path] = typer.Option(
            None, "--index", help="Write <DIR>/.well-known/agent-skills/ with index.json."
        ),
        all_: bool = typer.Option(False, "--all", help="Export every discovered toolkit."),
        force: bool = typer.Option(False, "--force", help="Replace existing packages under --agent-skills."),
    ) -> None:
        """Export toolkits as Agent Skills packages and/or a well-known discovery index."""
        from wbcore_agent_skills import export as _export

        if agent_skills is None and index is None:
            raise InvalidArgs("give -o DIR (Agent Skills packages) and/or --index DIR")
        if all_:
            toolkits = list(runtime.discover().toolkits.values())
        elif idents:
            toolkits = [runtime.toolkit(i) for i in idents]
        else:
            raise InvalidArgs("name at least one toolkit ID, or --all")
        from wbcore_runtime.trust import verdict as trust

        # A package is read by a model: a toolkit whose files do not verify is never exported.
        kept = []
        for tk in toolkits:
            why = trust.unavailable_reason(tk, runtime, resolve_web=True)
            if why and not all_:
                raise trust.IntegrityError(f"toolkit {tk.id} is unavailable: {why}; it was not exported "
                                           f"(check it: wbx toolkit verify {tk.id})")
            if why:
                warn(f"skipped {tk.id}: it is unavailable: {why}")
            else:
                kept.append(tk)
        toolkits = kept
        if agent_skills is not None:
            for tk in toolkits:
                path = _export.export_agent_skills(tk, agent_skills, force=force, runtime=runtime)
                typer.echo(f"exported {tk.id} → {path / 'SKILL.md'}")
        if index is not None:
            path = _export.export_index(toolkits, index, runtime=runtime)
            typer.echo(f"index {path} ({len(toolkits)} skill(s))")
